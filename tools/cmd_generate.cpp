// mpkv generate: stream a completion (or a chat reply with --chat) for a prompt.
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "engine/generator.h"
#include "kvcache/f16_kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mpkv::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt;
  int n_predict = 128, n_ctx = 4096, threads = 0;
  bool chat = false;
  float temp = 0.8f, top_p = 0.95f;
  int top_k = 40;
  int64_t seed = -1;
};

void run_generate(const GenerateArgs& a) {
  set_num_threads(a.threads);
  auto model = Model::load(a.model);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  const std::string text = a.chat ? tok.format_chat({{"user", a.prompt}}, true) : a.prompt;
  const std::vector<int32_t> ids = tok.encode(text, tok.add_bos(), /*parse_special=*/a.chat);

  GenerateOptions opts;
  opts.n_predict = a.n_predict;
  opts.n_ctx = a.n_ctx;
  opts.sampling.temperature = a.temp;
  opts.sampling.top_p = a.top_p;
  opts.sampling.top_k = a.top_k;
  opts.sampling.seed = a.seed >= 0 ? (uint64_t)a.seed
                                   : (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  const ModelConfig& c = model->config();
  F16KvCache cache({c.n_layer, c.n_head, c.n_head_kv, c.head_dim});
  GenerateStats stats;
  if (!a.chat) std::fputs(a.prompt.c_str(), stdout);
  auto res = generate(*model, tok, cache, {ids}, opts, stats, [&](int, int32_t t) {
    if (tok.is_end_of_generation(t)) return;
    const std::string piece = tok.token_piece(t);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  std::fprintf(stderr, "\n[%s] prompt %d tokens, %.1f tok/s | generated %d tokens, decode %.1f tok/s | stop: %s | seed %llu\n",
               c.name.c_str(), stats.n_prompt_tokens, stats.prefill_tok_s(), stats.n_generated, stats.decode_tok_s(),
               res[0].stop_reason.c_str(), (unsigned long long)opts.sampling.seed);
}
}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt (streams tokens)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", a->prompt, "prompt text")->required();
  sub->add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until end of generation)")->capture_default_str();
  sub->add_option("-c,--ctx", a->n_ctx, "context size per sequence (prompt + generated)")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_flag("--chat", a->chat, "format the prompt as a ChatML user message and reply as the assistant");
  sub->add_option("--temp", a->temp, "temperature (0: greedy)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->top_p, "nucleus sampling threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", a->seed, "sampling seed (-1: from the clock; the seed used is printed)")->capture_default_str();
  sub->callback([a] { run_generate(*a); });
}

}  // namespace mpkv::cli
