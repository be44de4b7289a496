// Three-way comparison on a golden's positions: llama.cpp's logits (the golden file), mpkv's
// (prefill and token-by-token decode) and the double-precision reference forward
// (tests/fixtures/forward_reference.h) on the same GGUF. Used to tell a defect from a near-tie where
// the engines' top-1 tokens differ (docs/models.md, "Against llama.cpp on the shapes"): per position
// it prints each one's logits at llama.cpp's best two tokens and its own best, and at the end how
// far each engine is from the exact values over the golden's top-k ids.
// With OUT.json it also writes the reference's top-k logits at those positions, in the golden's format
// (tests/golden/shapes/SHAPE.TYPE.reference.json: which positions the exact network calls a tie,
// and, at the golden's own ids, how far llama.cpp is from the exact values; golden_compare.h).
// Usage: shape_reference MODEL.gguf GOLDEN.json N [OUT.json]   (the first N positions; the reference
// costs about 2 multiply-adds in double per parameter per position)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "fixtures/forward_reference.h"
#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "util/error.h"

namespace mpkv {
namespace {

// What the reference knows of the file, read from its own keys and tensors (not from mpkv's config):
// llama pairs channels (2j, 2j+1), the others (j, j + d/2); the base; llama's rope_freqs.weight.
test::RefArch shape_arch(const GgufReader& g) {
  test::RefArch a;
  const std::string arch = g.get_string("general.architecture", "");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    throw Error("shape_reference: architecture '" + arch + "' (llama, qwen2, qwen3 only)");
  a.adjacent_rope = arch == "llama";
  a.rope_base = g.get_float(arch + ".rope.freq_base", 10000.0);
  if (const GgufTensorInfo* t = g.find_tensor("rope_freqs.weight")) {
    const float* f = reinterpret_cast<const float*>(t->data);
    a.rope_freqs.assign(f, f + t->n_elements());
  }
  return a;
}

// mpkv's logits [n][n_vocab]: one prefill batch, or token by token.
std::vector<float> mpkv_logits(const Model& m, const std::vector<int32_t>& toks, bool decode) {
  Forward fwd(m);
  F16KvCache cache(m.config().kv_dims());
  std::vector<float> out, lg;
  if (!decode) {
    std::vector<BatchToken> b;
    for (size_t i = 0; i < toks.size(); ++i) b.push_back({toks[i], (int)i, 0, true});
    fwd.run(cache, b, out);
    return out;
  }
  for (size_t i = 0; i < toks.size(); ++i) {
    fwd.run(cache, {{toks[i], (int)i, 0, true}}, lg);
    out.insert(out.end(), lg.begin(), lg.end());
  }
  return out;
}

template <class T>
std::pair<int, int> top2(const T* row, int n) {
  int a = 0, b = 1;
  if (row[b] > row[a]) std::swap(a, b);
  for (int v = 2; v < n; ++v)
    if (row[v] > row[a]) b = a, a = v;
    else if (row[v] > row[b]) b = v;
  return {a, b};
}

// The reference's top-k ids and logits per position, as the golden files hold llama.cpp's.
void write_reference(const std::string& path, const std::vector<std::vector<double>>& ref, const nlohmann::json& g,
                     const std::string& model_file, size_t top_k) {
  nlohmann::json out;
  out["what"] = "double-precision reference forward (tests/fixtures/forward_reference.h): top-k logits per position of the golden's tokens";
  out["command"] = "build/shape_reference .shapes/" + model_file + " GOLDEN.json " + std::to_string(ref.size()) + " OUT.json";
  out["model_file"] = model_file;
  out["golden_model_sha256_prefix"] = g.value("model_sha256_prefix", "");
  out["tokens"] = std::vector<int32_t>(g["tokens"].begin(), g["tokens"].begin() + ref.size());
  out["top_k"] = top_k;
  std::vector<int> order(ref[0].size());
  for (const auto& row : ref) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int a, int b) { return row[a] > row[b]; });
    nlohmann::json p;
    for (size_t k = 0; k < top_k; ++k) p["ids"].push_back(order[k]), p["logits"].push_back(std::round(row[order[k]] * 1e5) / 1e5);
    // The exact logits at llama.cpp's ids too, so a test can measure llama.cpp's own distance from
    // the exact network from the files alone (golden_compare.h, peer_distance).
    for (const auto& id : g["positions"][out["positions"].size()]["ids"])
      p["at_golden_ids"].push_back(std::round(row[id.get<int>()] * 1e5) / 1e5);
    out["positions"].push_back(p);
  }
  std::ofstream(path) << out.dump() << "\n";
}

struct Dist {
  double max = 0, sum = 0;
  int n = 0;
  void add(double d) { max = std::max(max, std::fabs(d)), sum += std::fabs(d), ++n; }
};

int run(int argc, char** argv) {
  if (argc != 4 && argc != 5) throw Error("usage: shape_reference MODEL.gguf GOLDEN.json N [OUT.json]");
  auto model = Model::load(argv[1]);
  std::ifstream f(argv[2]);
  if (!f) throw Error(std::string("cannot read ") + argv[2]);
  const nlohmann::json g = nlohmann::json::parse(f);
  const int nv = model->config().n_vocab;
  const size_t n = std::min<size_t>(std::stoul(argv[3]), g["tokens"].size());
  const std::vector<int32_t> toks(g["tokens"].begin(), g["tokens"].begin() + n);
  const std::vector<float> pre = mpkv_logits(*model, toks, false), dec = mpkv_logits(*model, toks, true);
  const auto ref = test::reference_logits(*model, toks, shape_arch(model->gguf()));
  Dist d_pre, d_dec, d_llama, d_pre_llama;
  std::printf("pos | llama.cpp: top1 id (logit) top2 id (logit) margin | ref at those | mpkv prefill at those, its top1 | "
              "mpkv decode at those, its top1 | ref top1 id, margin\n");
  for (size_t i = 0; i < n; ++i) {
    const auto& ids = g["positions"][i]["ids"];
    const auto& lg = g["positions"][i]["logits"];
    const float *p = &pre[i * nv], *dd = &dec[i * nv];
    for (size_t k = 0; k < ids.size(); ++k) {
      const int v = ids[k].get<int>();
      d_pre.add(p[v] - ref[i][v]), d_dec.add(dd[v] - ref[i][v]), d_llama.add(lg[k].get<double>() - ref[i][v]);
      d_pre_llama.add(p[v] - lg[k].get<double>());
    }
    const int a = ids[0].get<int>(), b = ids[1].get<int>();
    const double la = lg[0].get<double>(), lb = lg[1].get<double>();
    const auto [pa, pb] = top2(p, nv);
    const auto [da, db] = top2(dd, nv);
    const auto [ra, rb] = top2(ref[i].data(), nv);
    const bool flag = pa != a || da != a || ra != a;
    std::printf("%2zu%s| %6d (%.3f) %6d (%.3f) %.3f | %.3f %.3f | %.3f %.3f, %6d | %.3f %.3f, %6d | %6d, %.3f\n", i,
                flag ? "*" : " ", a, la, b, lb, la - lb, ref[i][a], ref[i][b], p[a], p[b], pa, dd[a], dd[b], da, ra,
                ref[i][ra] - ref[i][rb]);
  }
  auto line = [](const char* what, const Dist& d) { std::printf("%-28s max %.4f mean %.4f (%d logits)\n", what, d.max, d.sum / d.n, d.n); };
  line("mpkv prefill - reference", d_pre);
  line("mpkv decode - reference", d_dec);
  line("llama.cpp - reference", d_llama);
  line("mpkv prefill - llama.cpp", d_pre_llama);
  if (argc == 5) {
    const std::string model_path = argv[1];
    write_reference(argv[4], ref, g, model_path.substr(model_path.rfind('/') + 1), g["top_k"].get<size_t>());
  }
  return 0;
}

}  // namespace
}  // namespace mpkv

int main(int argc, char** argv) {
  try {
    return mpkv::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shape_reference: %s\n", e.what());
    return 1;
  }
}
