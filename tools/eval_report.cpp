#include "eval_report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace mpkv::cli {

namespace {

// Below this many bootstrap blocks a resample sees too few distinct blocks for its spread to stand
// for the sampling spread (with 2 blocks, e.g., the interval collapses).
constexpr int64_t kFewBlocks = 16;

std::string fmt(const char* f, double x) {
  char s[64];
  std::snprintf(s, sizeof s, f, x);
  return s;
}

// At most n bytes of s, not cutting a UTF-8 sequence.
std::string utf8_prefix(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

std::string eval_markdown(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                          const DriftText& text) {
  std::string s = "# mpkv eval\n\n    " + info.command + "\n\n";
  s += "Model `" + info.model + "`; " + std::to_string(info.threads) + " threads; " + fmt("%.0f", info.seconds) + " s in all.\n";
  if (!rows.empty()) {
    const int64_t scored = rows.front().scored;
    s += "Text `" + info.file + "`: " + std::to_string(info.windows) + " windows of " + std::to_string(info.n_ctx) +
         " tokens (" + std::to_string((int64_t)info.windows * info.n_ctx) + " of its " +
         std::to_string(info.tokens_in_file) + " tokens), the second half of each scored: " + std::to_string(scored) +
         " positions per row.\n\n";
    s += "Protocols: **decode** = every token attends to the cache state it would see when generated token by token "
         "(quantized pages, fp16 window, shrinks); **prefill-fake** = one teacher-forced pass per window with K/V "
         "quantized and dequantized at their final bits (no window). KL = KL(16-bit || method) in nats, top-1 = "
         "argmax agreement with the 16-bit cache, both at the scored positions. Stored bits/element = every byte the "
         "cache holds at the end (codes, scales, zeros, fp16 sink and window, page metadata) * 8 / K and V "
         "elements the model needs then (a sliding-window layer: its last W positions only); progressive caches ran "
         "under a budget that just holds every window at its final bits.\n\n";
    s += "Intervals: " + fmt("%.0f", 100 * info.ci.level) + "% block bootstrap (" + std::to_string(info.ci.resamples) +
         " resamples, seed " + std::to_string(info.ci.seed) + ") over " + std::to_string(rows.front().ci_blocks) +
         " blocks of " + std::to_string(info.ci.block) + " consecutive scored positions of one window; dPPL paired with "
         "the 16-bit row on the same positions." +
         (rows.front().ci_blocks < kFewBlocks
              ? " **Fewer than " + std::to_string(kFewBlocks) + " blocks: too few for the intervals to be trusted "
                "(they come out too narrow); use more windows or a smaller --ci-block.**"
              : std::string()) +
         "\n\n";
    s += "| method | avg bits | protocol | PPL | dPPL % | dPPL 95% CI | KL mean | KL 95% CI | KL p99 | top-1 % | "
         "stored bits/elem | bytes/token |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const EvalRow& r : rows) {
      s += "| " + r.label + " | " + fmt("%g", r.bits) + " | " + r.protocol + " | " + fmt("%.4f", r.ppl) + " | " +
           fmt("%+.2f", r.ppl_delta_pct) + " | [" + fmt("%+.2f", r.ci.ppl_delta_pct.lo) + ", " +
           fmt("%+.2f", r.ci.ppl_delta_pct.hi) + "] | " + fmt("%.5f", r.kl_mean) + " | [" + fmt("%.5f", r.ci.kl_mean.lo) +
           ", " + fmt("%.5f", r.ci.kl_mean.hi) + "] | " + fmt("%.4f", r.kl_p99) + " | " +
           fmt("%.2f", 100 * r.top1) + " | " +
           (r.stored_bits_per_element >= 0 ? fmt("%.2f", r.stored_bits_per_element) : std::string("-")) + " | " +
           (r.bytes_per_token >= 0 ? fmt("%.0f", r.bytes_per_token) : std::string("-")) + " |\n";
    }
  }
  if (!info.skipped.empty()) {
    s += "\nNot run:\n";
    for (const auto& k : info.skipped) s += "- " + k + "\n";
  }
  if (drift) {
    s += "\n## Drift: " + std::to_string(drift->tokens) + " greedy tokens of the 16-bit cache, teacher-forced through each "
         "method (decode protocol)\n\nPrompt (" + std::to_string(drift->prompt_tokens) + " tokens): \"" + text.prompt +
         "\". Reference answer (first 300 bytes): \"" + utf8_prefix(text.generated, 300) + "...\"\n\nKL mean and top-1 agreement (%) per " + std::to_string(drift->bucket) + " generated positions.\n\n";
    s += "| method | all: KL mean | KL p99 | top-1 % |";
    for (int b : drift->bucket_start) s += " " + std::to_string(b) + "+ |";
    s += "\n|---|---|---|---|";
    for (size_t b = 0; b < drift->bucket_start.size(); ++b) s += "---|";
    s += "\n";
    for (const DriftCurve& c : drift->methods) {
      s += "| " + c.label + " | " + fmt("%.4f", c.kl_mean_all) + " | " + fmt("%.3f", c.kl_p99_all) + " | " +
           fmt("%.1f", 100 * c.top1_all) + " |";
      for (size_t b = 0; b < c.kl_mean.size(); ++b) s += " " + fmt("%.3f", c.kl_mean[b]) + " / " + fmt("%.0f", 100 * c.top1[b]) + " |";
      s += "\n";
    }
  }
  return s;
}

std::string eval_json(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                      const DriftText& text) {
  nlohmann::json j = {{"command", info.command}, {"model", info.model}, {"file", info.file}, {"n_ctx", info.n_ctx},
                      {"windows", info.windows}, {"tokens_used", (int64_t)info.windows * info.n_ctx},
                      {"tokens_in_file", info.tokens_in_file}, {"threads", info.threads}, {"seconds", info.seconds},
                      {"skipped", info.skipped},
                      {"bootstrap", {{"block", info.ci.block}, {"resamples", info.ci.resamples},
                                     {"level", info.ci.level}, {"seed", info.ci.seed}}}};
  j["scored"] = rows.empty() ? 0 : rows.front().scored;
  j["rows"] = nlohmann::json::array();
  for (const EvalRow& r : rows) {
    nlohmann::json x = {{"method", r.method}, {"label", r.label}, {"bits", r.bits}, {"protocol", r.protocol},
                        {"ppl", r.ppl}, {"ppl_delta_pct", r.ppl_delta_pct}, {"kl_mean", r.kl_mean},
                        {"kl_p99", r.kl_p99}, {"top1", r.top1}, {"scored", r.scored}, {"seconds", r.seconds}};
    x["stored_bits_per_element"] = r.stored_bits_per_element >= 0 ? nlohmann::json(r.stored_bits_per_element) : nlohmann::json();
    x["bytes_per_token"] = r.bytes_per_token >= 0 ? nlohmann::json(r.bytes_per_token) : nlohmann::json();
    auto ci = [](const RowIntervals& c) {
      return nlohmann::json{{"block", c.block}, {"ppl_delta_pct", {c.ppl_delta_pct.lo, c.ppl_delta_pct.hi}},
                            {"kl_mean", {c.kl_mean.lo, c.kl_mean.hi}}};
    };
    x["ci95"] = ci(r.ci);
    x["ci_blocks"] = r.ci_blocks;
    x["ci95_by_block"] = nlohmann::json::array();
    for (const RowIntervals& c : r.ci_by_block) x["ci95_by_block"].push_back(ci(c));
    j["rows"].push_back(x);
  }
  if (drift) {
    nlohmann::json d = {{"prompt", text.prompt}, {"generated", text.generated}, {"prompt_tokens", drift->prompt_tokens}, {"tokens", drift->tokens},
                        {"bucket", drift->bucket}, {"bucket_start", drift->bucket_start}, {"seconds", drift->seconds}};
    d["methods"] = nlohmann::json::array();
    for (const DriftCurve& c : drift->methods)
      d["methods"].push_back({{"label", c.label}, {"kl_mean", c.kl_mean}, {"top1", c.top1}, {"kl_mean_all", c.kl_mean_all},
                              {"kl_p99_all", c.kl_p99_all}, {"top1_all", c.top1_all}});
    j["drift"] = d;
  } else {
    j["drift"] = nullptr;
  }
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";  // model text may hold broken UTF-8
}

}  // namespace mpkv::cli
