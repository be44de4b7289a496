// Rows of `mpkv eval --task` read back from per-item outputs (task_import.h).
#include "task_import.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "eval/jsonl.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

using nlohmann::json;

// The row-level fields every line of a method repeats.
struct RowFields {
  double bits = 0, peak = 0, context = 0, seconds = 0;
  bool budgeted = false;
  PromptPolicy policy = PromptPolicy::full;
  bool operator==(const RowFields&) const = default;
};

template <class T>
T field(const json& j, const char* name, const std::string& where) {
  MPKV_CHECK(j.contains(name), where + ": missing field '" + name + "'");
  try {
    return j.at(name).get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": field '" + name + "' has the wrong type");
  }
}

struct Pending {
  RowFields row;
  std::vector<bool> seen;
  TaskMethodResult result;
};

}  // namespace

std::vector<TaskRun> import_task_runs(const std::string& jsonl, const std::string& source, const TaskFileReport& f) {
  std::map<std::string, size_t> index;  // item id -> position in f.items
  for (size_t i = 0; i < f.items.size(); ++i) index[f.items[i].id] = i;
  std::vector<std::string> order;  // methods in order of first appearance
  std::map<std::string, Pending> by_method;
  for_each_jsonl_line(jsonl, source, [&](const json& j, const std::string& where) {
    MPKV_CHECK(j.is_object(), where + ": not a JSON object");
    const auto id = field<std::string>(j, "id", where);
    const auto it = index.find(id);
    if (it == index.end()) return;  // an item of another file
    const auto method = field<std::string>(j, "method", where);
    RowFields row{field<double>(j, "bits", where), field<double>(j, "peak_bits_per_elem", where),
                  field<double>(j, "context_bits_per_elem", where), field<double>(j, "seconds", where),
                  field<bool>(j, "budgeted", where), parse_prompt_policy(field<std::string>(j, "policy", where))};
    auto [pos, fresh] = by_method.try_emplace(method);
    Pending& p = pos->second;
    if (fresh) {
      order.push_back(method);
      p.row = row;
      p.seen.assign(f.items.size(), false);
      p.result.items.resize(f.items.size());
      p.result.seconds = row.seconds;
      p.result.peak_bits_per_elem = row.peak;
      p.result.context_bits_per_elem = row.context;
    }
    MPKV_CHECK(p.row == row, where + ": method '" + method + "' has row fields (bits, budgeted, policy, "
                                     "peak_bits_per_elem, context_bits_per_elem, seconds) that differ from its first line");
    const size_t i = it->second;
    const TaskItem& item = f.items[i];
    MPKV_CHECK(!p.seen[i], where + ": item '" + id + "' of method '" + method + "' given twice");
    MPKV_CHECK(field<std::string>(j, "answer", where) == item.answer,
               where + ": item '" + id + "' has another answer than in " + f.path + " (another task file?)");
    ItemOutcome& o = p.result.items[i];
    o.prompt_tokens = field<int>(j, "prompt_tokens", where);
    MPKV_CHECK(o.prompt_tokens == (int)f.prompts[i].size(),
               where + ": item '" + id + "' was run on " + std::to_string(o.prompt_tokens) + " prompt tokens, " + f.path +
                   " tokenizes to " + std::to_string(f.prompts[i].size()) + " (another prompt or tokenizer?)");
    o.generated = field<std::string>(j, "generated", where);
    o.kept_tokens = field<int>(j, "kept_tokens", where);
    o.generated_tokens = field<int>(j, "generated_tokens", where);
    o.budget_bytes = field<size_t>(j, "budget_bytes", where);
    o.over_budget = field<bool>(j, "over_budget", where);
    o.correct = answer_correct(o.generated, item.rule, item.answer);  // scored here, by the one rule
    p.seen[i] = true;
  });
  std::vector<TaskRun> runs;
  for (const std::string& m : order) {
    Pending& p = by_method[m];
    const auto missing = std::find(p.seen.begin(), p.seen.end(), false);
    MPKV_CHECK(missing == p.seen.end(), source + ": method '" + m + "' lacks item '" +
                                            f.items[missing - p.seen.begin()].id + "' of " + f.path);
    TaskRun r;
    r.method.label = m;
    r.method.bits = p.row.bits;
    r.method.budgeted = p.row.budgeted;
    r.method.policy = p.row.policy;
    r.result = std::move(p.result);
    runs.push_back(std::move(r));
  }
  return runs;
}

void order_task_runs(std::vector<TaskRun>& runs) {
  std::stable_partition(runs.begin(), runs.end(), is_f16_reference);
}

}  // namespace mpkv::cli
