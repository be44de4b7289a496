// Writes one tiny model of tests/fixtures (test::tiny_variant_spec) as a GGUF file: the models
// scripts/make_arch_golden.sh has llama.cpp compute golden logits on (tests/golden/archs/).
// Prints the context per sequence the variant is run with (TinyModelSpec::run_n_ctx, else 256:
// llama.cpp's and mpkv's 0 for the tiny models' context_length), which the script gives llama.cpp.
// Usage: write_tiny_model VARIANT OUT.gguf
#include <cstdio>

#include "fixtures/tiny_model.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_tiny_model VARIANT OUT.gguf\n");
    return 2;
  }
  try {
    const mpkv::test::TinyModelSpec spec = mpkv::test::tiny_variant_spec(argv[1]);
    mpkv::test::write_tiny_model(argv[2], spec);
    std::printf("%d\n", spec.run_n_ctx > 0 ? spec.run_n_ctx : spec.context_length);
  } catch (const mpkv::Error& e) {
    std::fprintf(stderr, "write_tiny_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
