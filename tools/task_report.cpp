// Markdown / JSON of `mpkv eval --task` (task_report.h).
#include "task_report.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "eval/accuracy_stats.h"

namespace mpkv::cli {

namespace {

using nlohmann::json;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::vector<bool> correct_of(const TaskMethodResult& r) {
  std::vector<bool> v;
  for (const ItemOutcome& o : r.items) v.push_back(o.correct);
  return v;
}

// The per-row figures shared by markdown and JSON.
struct RowStats {
  int right = 0, n = 0, over = 0;
  WilsonInterval ci;
  double budget_bits = 0, kept_frac = 0;  // means over items (budget_bits 0: unbudgeted)
  bool paired = false;
  PairedCounts pc;
  double p = 1;
};

RowStats row_stats(const TaskFileReport& f, const TaskRun& run, const TaskReportInfo& info) {
  RowStats s;
  const size_t elems = (size_t)info.dims.n_layer * info.dims.n_head_kv * info.dims.head_dim * 2;
  for (size_t i = 0; i < run.result.items.size(); ++i) {
    const ItemOutcome& o = run.result.items[i];
    s.right += o.correct;
    s.over += o.over_budget;
    const double n = o.prompt_tokens + f.items[i].max_tokens;
    s.budget_bits += o.budget_bytes * 8.0 / (n * elems);
    s.kept_frac += double(o.kept_tokens) / o.prompt_tokens;
  }
  s.n = (int)run.result.items.size();
  s.budget_bits /= s.n;
  s.kept_frac /= s.n;
  s.ci = wilson_interval(s.right, s.n);
  if (!f.runs.empty() && is_f16_reference(f.runs[0]) && &run != &f.runs[0]) {
    s.paired = true;
    s.pc = paired_counts(correct_of(f.runs[0].result), correct_of(run.result));
    s.p = mcnemar_exact_p(s.pc.ref_only, s.pc.method_only);
  }
  return s;
}

std::string depth_table(const TaskFileReport& f) {
  std::map<double, int> depths;
  for (const TaskItem& it : f.items) ++depths[it.depth];
  if (depths.size() < 2) return "";
  std::string s = "\nAccuracy % by depth of the answer (0 = start of the context; items per depth:";
  for (const auto& [d, n] : depths) s += " " + std::to_string(n);
  s += ")\n\n| method |";
  for (const auto& [d, n] : depths) s += fmt(" %.1f |", d);
  s += "\n|---|";
  for (size_t i = 0; i < depths.size(); ++i) s += "---|";
  s += "\n";
  for (const TaskRun& r : f.runs) {
    std::map<double, int> right;
    for (size_t i = 0; i < f.items.size(); ++i) right[f.items[i].depth] += r.result.items[i].correct;
    s += "| " + r.method.label + " |";
    for (const auto& [d, n] : depths) s += fmt(" %.0f |", 100.0 * right[d] / n);
    s += "\n";
  }
  return s;
}

std::string file_section(const TaskFileReport& f, const TaskReportInfo& info) {
  size_t lo = SIZE_MAX, hi = 0, sum = 0;
  for (const auto& p : f.prompts) {
    lo = std::min(lo, p.size());
    hi = std::max(hi, p.size());
    sum += p.size();
  }
  std::string s = "\n### " + f.path + "\n\n" + std::to_string(f.items.size()) + " items; prompt tokens " +
                  std::to_string(lo) + " .. " + std::to_string(hi) + fmt(" (mean %.0f)\n\n", double(sum) / f.items.size());
  s += "| method | bits | budget bits/elem | peak stored bits/elem | prompt kept % | right | accuracy % | Wilson 95% | "
       "diff vs f16 (pts) | f16 only / method only | McNemar p | seconds |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const TaskRun& r : f.runs) {
    const RowStats st = row_stats(f, r, info);
    s += "| " + r.method.label + (st.over ? " (over budget: " + std::to_string(st.over) + " items)" : "") + " | " +
         fmt("%g", r.method.bits) + " | " + (st.budget_bits > 0 ? fmt("%.2f", st.budget_bits) : "-") + " | " +
         fmt("%.2f", r.result.peak_bits_per_elem) + " | " + fmt("%.1f", 100 * st.kept_frac) + " | " +
         std::to_string(st.right) + "/" + std::to_string(st.n) + " | " + fmt("%.1f", 100.0 * st.right / st.n) + " | " +
         fmt("%.1f", 100 * st.ci.lo) + " - " + fmt("%.1f", 100 * st.ci.hi) + " | " +
         (st.paired ? fmt("%+.1f", 100 * st.pc.difference()) : "-") + " | " +
         (st.paired ? std::to_string(st.pc.ref_only) + " / " + std::to_string(st.pc.method_only) : "-") + " | " +
         (st.paired ? fmt("%.3g", st.p) : "-") + " | " + fmt("%.0f", r.result.seconds) + " |\n";
  }
  return s + depth_table(f);
}

}  // namespace

bool is_f16_reference(const TaskRun& r) {
  return r.method.label == "f16" && !r.method.budgeted && r.method.policy == PromptPolicy::full;
}

std::string task_markdown(const TaskReportInfo& info, const std::vector<TaskFileReport>& files) {
  std::string s = "## Task accuracy: " + info.model + "\n\n    " + info.command + "\n\nBudget per sequence: " +
                  info.budget_method + "'s byte-model bound at prompt + max_tokens; " + std::to_string(info.parallel) +
                  " item(s) at once; " + std::to_string(info.threads) + " thread(s); f16-evict sink " +
                  std::to_string(info.sink) + " tokens. Greedy decoding, exact match (docs/accuracy_tasks.md).\n";
  for (const TaskFileReport& f : files) s += file_section(f, info);
  return s;
}

std::string task_json(const TaskReportInfo& info, const std::vector<TaskFileReport>& files) {
  json j{{"command", info.command}, {"model", info.model}, {"budget_method", info.budget_method},
         {"parallel", info.parallel}, {"threads", info.threads}, {"sink", info.sink}, {"files", json::array()}};
  for (const TaskFileReport& f : files) {
    json jf{{"path", f.path}, {"items", f.items.size()}, {"rows", json::array()}};
    for (const TaskRun& r : f.runs) {
      const RowStats st = row_stats(f, r, info);
      json row{{"method", r.method.label}, {"bits", r.method.bits}, {"right", st.right}, {"n", st.n},
               {"accuracy", double(st.right) / st.n}, {"wilson95", {st.ci.lo, st.ci.hi}},
               {"budget_bits_per_elem", st.budget_bits}, {"peak_bits_per_elem", r.result.peak_bits_per_elem},
               {"context_bits_per_elem", r.result.context_bits_per_elem},
               {"prompt_kept_fraction", st.kept_frac}, {"over_budget_items", st.over}, {"seconds", r.result.seconds}};
      if (st.paired)
        row["paired_vs_f16"] = {{"difference", st.pc.difference()}, {"f16_only", st.pc.ref_only},
                                {"method_only", st.pc.method_only}, {"mcnemar_p", st.p}};
      jf["rows"].push_back(row);
    }
    j["files"].push_back(jf);
  }
  return j.dump(1) + "\n";
}

std::string task_outputs_jsonl(const std::vector<TaskFileReport>& files) {
  std::string s;
  for (const TaskFileReport& f : files)
    for (const TaskRun& r : f.runs)
      for (size_t i = 0; i < f.items.size(); ++i) {
        const ItemOutcome& o = r.result.items[i];
        const auto got = extract_answer(o.generated, f.items[i].rule);
        json j{{"file", f.path}, {"method", r.method.label}, {"id", f.items[i].id}, {"correct", o.correct},
               {"answer", f.items[i].answer}, {"extracted", got ? *got : ""}, {"generated", o.generated},
               {"prompt_tokens", o.prompt_tokens}, {"kept_tokens", o.kept_tokens}, {"generated_tokens", o.generated_tokens},
               {"budget_bytes", o.budget_bytes}, {"over_budget", o.over_budget},
               // the row's fields on every line, so that a file of one row can be read back (--import)
               {"bits", r.method.bits}, {"budgeted", r.method.budgeted}, {"policy", prompt_policy_name(r.method.policy)},
               {"peak_bits_per_elem", r.result.peak_bits_per_elem},
               {"context_bits_per_elem", r.result.context_bits_per_elem}, {"seconds", r.result.seconds}};
        s += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      }
  return s;
}

}  // namespace mpkv::cli
