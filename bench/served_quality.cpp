// Quality of served answers (docs/results/serving.md, "Quality of what is served"): every answer a
// server streamed with per-token logprobs (bench/serve_bench.py --keep-text --top-logprobs N) is
// teacher-forced through mpkv's f16 cache, and at each answer position the served next-token
// distribution is compared with f16's, the drift measure of `mpkv eval` (docs/algorithms.md §9)
// read from the other side: there the f16 text is forced through a quantized cache, here the text
// a quantized cache produced under memory pressure is forced through f16.
//
// Per answer position i (f16 log-softmax p over the whole vocabulary, served top-N list q):
//   top-1  the served token equals f16's most likely token (over the whole vocabulary: with
//          ignore_eos a server samples end-of-generation tokens too, vLLM's semantics)
//   KL     KL(q' || p') with q' and p' the served and f16 distributions restricted to the served
//          top-N tokens and renormalized there: the server returns only N logprobs, so this is the
//          divergence on the head of the distribution; `mass` (the mean sum of the N served
//          probabilities) says how much of it that head holds. f16's own answers score 0
//   NLL    -log p(served token): how likely f16 finds what was served
// With --reference FILE (the same requests served by f16 alone), each answer's first position whose
// token differs from the reference's answer to the same request (matched by seed) is reported too.
//
// Token ids are recovered from each logprob entry's "bytes" (the token's piece, unique per id in
// the model's vocabulary); the prompt is re-encoded as the server encodes it (chat template with the
// generation prompt, or raw text for /v1/completions).
//
// Usage: served_quality -m MODEL [-t THREADS] [--bucket 256] [--reference F16.json] RESULT.json...
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "eval/kv_metrics.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using json = nlohmann::json;
using mpkv::Error;

struct Args {
  std::string model, reference;
  std::vector<std::string> results;
  int threads = 0, bucket = 256;
};

// One served answer: its prompt, its tokens and, per token, the served top-N (id, logprob).
struct ServedAnswer {
  int64_t seed = 0;
  std::vector<int32_t> prompt, answer;
  std::vector<std::vector<std::pair<int32_t, double>>> top;
};

// Running sums of one result file (or one bucket of positions).
struct QualitySums {
  int64_t n = 0, top1 = 0;
  double kl = 0, nll = 0, mass = 0;
  std::vector<double> kls;
  void add(bool agree, double kl_i, double nll_i, double mass_i) {
    ++n;
    top1 += agree;
    kl += kl_i;
    nll += nll_i;
    mass += mass_i;
    kls.push_back(kl_i);
  }
  double kl_p99() {
    if (kls.empty()) return 0;
    std::sort(kls.begin(), kls.end());
    return kls[std::min(kls.size() - 1, (size_t)std::ceil(0.99 * kls.size()) - 1)];
  }
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      MPKV_CHECK(i + 1 < argc, "served_quality: " + s + " needs a value");
      return argv[++i];
    };
    if (s == "-m") a.model = value();
    else if (s == "-t") a.threads = std::stoi(value());
    else if (s == "--bucket") a.bucket = std::stoi(value());
    else if (s == "--reference") a.reference = value();
    else if (!s.empty() && s[0] == '-') throw Error("served_quality: unknown option " + s);
    else a.results.push_back(s);
  }
  MPKV_CHECK(!a.model.empty() && !a.results.empty(),
             "usage: served_quality -m MODEL [-t THREADS] [--bucket 256] [--reference F16.json] RESULT.json...");
  MPKV_CHECK(a.bucket >= 1, "served_quality: --bucket must be at least 1");
  return a;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  MPKV_CHECK(f.good(), "served_quality: cannot read " + path);
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw Error("served_quality: " + path + " is not JSON: " + e.what());
  }
}

// Piece bytes -> id over the vocabulary (the first id of a piece shared by several: special tokens
// only, which a served answer never contains with ignore_eos).
std::unordered_map<std::string, int32_t> piece_ids(const mpkv::Tokenizer& tok) {
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) ids.emplace(tok.token_piece(id), id);
  return ids;
}

// A token written by serve_bench as the hex of its bytes.
int32_t id_of(const std::string& hex, const std::unordered_map<std::string, int32_t>& ids) {
  MPKV_CHECK(hex.size() % 2 == 0, "served_quality: a token's hex bytes have odd length");
  std::string piece;
  for (size_t i = 0; i < hex.size(); i += 2) piece.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  auto it = ids.find(piece);
  MPKV_CHECK(it != ids.end(), "served_quality: a served token's bytes match no vocabulary piece (another model?)");
  return it->second;
}

std::vector<int32_t> encode_prompt(const mpkv::Tokenizer& tok, const std::string& endpoint, const json& prompt) {
  if (prompt.is_array()) {  // a whole conversation (bench/multi_turn.py): [{"role", "content"}, ...]
    std::vector<mpkv::ChatMessage> messages;
    for (const json& m : prompt) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    return tok.encode(tok.format_chat(messages, /*add_generation_prompt=*/true), tok.add_bos(), true);
  }
  if (endpoint == "chat")
    return tok.encode(tok.format_chat({{"user", prompt.get<std::string>()}}, /*add_generation_prompt=*/true), tok.add_bos(), true);
  return tok.encode(prompt.get<std::string>(), tok.add_bos(), /*parse_special=*/false);
}

// The answers of one serve_bench result file that carry their prompt and logprobs.
std::vector<ServedAnswer> load_answers(const json& result, const mpkv::Tokenizer& tok,
                                       const std::unordered_map<std::string, int32_t>& ids) {
  const std::string endpoint = result.at("workload").value("endpoint", "completions");
  std::vector<ServedAnswer> out;
  for (const json& rec : result.at("records")) {
    if (!rec.value("ok", false) || !rec.contains("prompt") || !rec.contains("logprobs")) continue;
    ServedAnswer a;
    a.seed = rec.at("seed").get<int64_t>();
    a.prompt = encode_prompt(tok, endpoint, rec.at("prompt"));
    // Each entry: [token hex, logprob, [[alternative hex, logprob], ...]] (bench/serve_bench.py).
    for (const json& e : rec.at("logprobs")) {
      a.answer.push_back(id_of(e.at(0).get<std::string>(), ids));
      auto& top = a.top.emplace_back();
      for (const json& t : e.at(2)) top.emplace_back(id_of(t.at(0).get<std::string>(), ids), t.at(1).get<double>());
    }
    if (!a.answer.empty()) out.push_back(std::move(a));
  }
  return out;
}

// KL(q' || p') over the served top-N ids, both renormalized there, and the served mass sum_N q.
std::pair<double, double> head_kl(const std::vector<std::pair<int32_t, double>>& top, const double* logp) {
  double q_mass = 0, p_mass = 0;
  for (const auto& [id, lq] : top) {
    q_mass += std::exp(lq);
    p_mass += std::exp(logp[id]);
  }
  if (q_mass <= 0 || p_mass <= 0) return {0.0, q_mass};
  double kl = 0;
  for (const auto& [id, lq] : top) {
    const double q = std::exp(lq) / q_mass;
    if (q > 0) kl += q * (std::log(q) - (logp[id] - std::log(p_mass)));
  }
  return {std::max(0.0, kl), q_mass};
}

// Teacher-forces prompt + answer through a fresh f16 cache; adds every answer position to `all`
// and to its bucket.
void score_answer(const mpkv::Model& model, const ServedAnswer& a, int bucket,
                  QualitySums& all, std::vector<QualitySums>& buckets) {
  const size_t P = a.prompt.size(), N = a.answer.size();
  std::vector<int32_t> tokens = a.prompt;
  tokens.insert(tokens.end(), a.answer.begin(), a.answer.end() - 1);
  // The f16 cache `mpkv serve --kv-method f16` runs (fp16 pages), so f16's own answers score top-1 = 1.
  const auto cache = mpkv::make_kv_cache(mpkv::KvCacheOptions{}, model.config().kv_dims());
  mpkv::ModelRunner runner(model, *cache);
  const int n_vocab = model.config().n_vocab;
  std::vector<double> logp(n_vocab);
  // Logit row k (token index P - 1 + i) predicts answer token i.
  runner.prefill(0, tokens, 0, 512, {P - 1, P - 1 + N}, [&](size_t first, size_t n, const float* logits) {
    for (size_t r = 0; r < n; ++r) {
      const size_t i = first + r - (P - 1);
      mpkv::log_softmax(logits + r * n_vocab, n_vocab, logp.data());
      const auto [kl, mass] = head_kl(a.top[i], logp.data());
      const bool agree = mpkv::argmax(logp.data(), n_vocab) == a.answer[i];
      const double nll = -logp[a.answer[i]];
      all.add(agree, kl, nll, mass);
      const size_t b = i / bucket;
      if (buckets.size() <= b) buckets.resize(b + 1);
      buckets[b].add(agree, kl, nll, mass);
    }
  });
}

// First position where `a` differs from the reference answer to the same seed (its length when
// one is a prefix of the other); -1 without a reference answer for that seed.
int first_divergence(const ServedAnswer& a, const std::map<int64_t, const ServedAnswer*>& ref) {
  auto it = ref.find(a.seed);
  if (it == ref.end()) return -1;
  const auto& r = it->second->answer;
  const size_t n = std::min(r.size(), a.answer.size());
  for (size_t i = 0; i < n; ++i)
    if (r[i] != a.answer[i]) return (int)i;
  return (int)n;
}

void report(const std::string& label, int n_answers, QualitySums& all, std::vector<QualitySums>& buckets, int bucket,
            const std::vector<int>& divergence) {
  if (all.n == 0) {
    std::printf("%-28s no answers with logprobs (run serve_bench with --keep-text --top-logprobs N)\n", label.c_str());
    return;
  }
  std::printf("%-28s answers %3d  positions %7lld  top-1 %.4f  KL mean %.5f p99 %.4f  f16 NLL %.4f  served mass %.4f",
              label.c_str(), n_answers, (long long)all.n, (double)all.top1 / all.n, all.kl / all.n, all.kl_p99(),
              all.nll / all.n, all.mass / all.n);
  if (!divergence.empty()) {
    std::vector<int> d = divergence;
    std::sort(d.begin(), d.end());
    std::printf("  diverges from f16 at p50 %d (min %d, max %d)", d[d.size() / 2], d.front(), d.back());
  }
  std::printf("\n  per %d positions: KL", bucket);
  for (auto& b : buckets) std::printf(" %.4f", b.n ? b.kl / b.n : 0.0);
  std::printf("\n  per %d positions: top-1", bucket);
  for (auto& b : buckets) std::printf(" %.3f", b.n ? (double)b.top1 / b.n : 0.0);
  std::printf("\n");
}

int run(const Args& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  auto model = mpkv::Model::load(a.model);
  const mpkv::Tokenizer tok = mpkv::Tokenizer::from_gguf(model->gguf());
  const auto ids = piece_ids(tok);
  std::vector<ServedAnswer> ref_answers;
  std::map<int64_t, const ServedAnswer*> ref;
  if (!a.reference.empty()) {
    ref_answers = load_answers(read_json(a.reference), tok, ids);
    for (const auto& r : ref_answers) ref[r.seed] = &r;
  }
  for (const std::string& path : a.results) {
    const json result = read_json(path);
    const auto answers = load_answers(result, tok, ids);
    QualitySums all;
    std::vector<QualitySums> buckets;
    std::vector<int> divergence;
    for (const auto& ans : answers) {
      score_answer(*model, ans, a.bucket, all, buckets);
      if (const int d = first_divergence(ans, ref); d >= 0) divergence.push_back(d);
    }
    report(result.value("label", path), (int)answers.size(), all, buckets, a.bucket, divergence);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each configuration's rows as soon as they are scored
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "served_quality: %s\n", e.what());
    return 1;
  }
}
