// Stands in for ggml.h when building llama.cpp's common/json.cpp without ggml (docs/chat_templates.md,
// "Building"): json.cpp includes it only for GGML_ASSERT, which it makes nlohmann-json's JSON_ASSERT.
#pragma once
#include <cstdio>
#include <cstdlib>

#define GGML_ASSERT(x)                                                          \
  do {                                                                          \
    if (!(x)) {                                                                 \
      std::fprintf(stderr, "%s:%d: GGML_ASSERT(%s) failed\n", __FILE__, __LINE__, #x); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
