// `mpkv eval --task` (eval_task.h): methods, budget, runs and the report.
#include "eval_task.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "cli_options.h"
#include "cli_util.h"
#include "gguf/gguf_reader.h"
#include "eval/eval_methods.h"
#include "eval/task_run.h"
#include "task_import.h"
#include "task_report.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

// A progress line on stderr at most every kProgressSeconds (a 200-item row at 1K takes minutes).
constexpr double kProgressSeconds = 30;
std::function<void(const TaskProgress&)> progress_printer() {
  auto last = std::make_shared<double>(0.0);
  return [last](const TaskProgress& p) {
    if (p.done == p.total || p.seconds - *last < kProgressSeconds) return;  // the last batch: the summary line says it
    *last = p.seconds;
    std::fprintf(stderr, "eval --task:   %zu / %zu items, %d right, %.0f s\n", p.done, p.total, p.right, p.seconds);
  };
}

// The rows: f16-evict / f16-trunc (prompt-level cuts at the budget) and everything eval_matrix names.
std::vector<TaskMethod> task_methods(const TaskEvalArgs& a, const Model& model) {
  std::vector<TaskMethod> out;
  std::vector<std::string> rest;
  for (const std::string& n : a.methods) {
    if (n == "f16-evict" || n == "f16-trunc") {
      TaskMethod t;
      t.label = n;
      t.policy = n == "f16-evict" ? PromptPolicy::streaming : PromptPolicy::truncate;
      out.push_back(t);
    } else {
      rest.push_back(n);
    }
  }
  const EvalMatrix m = rest.empty() ? EvalMatrix{} : eval_matrix(rest, a.bits, a.plan_dir, a.model);
  for (const std::string& s : m.skipped) std::fprintf(stderr, "eval --task: skipped %s\n", s.c_str());
  std::vector<TaskMethod> matrix;
  for (const EvalMethod& e : m.methods) {
    TaskMethod t;
    t.label = e.label;
    t.bits = e.bits;
    t.kv = e.kv;
    t.kv.model = kv_model_identity(model);
    t.budgeted = !(e.kv.method == KvMethod::f16 && e.kv.plan_file.empty());
    matrix.push_back(t);
  }
  // f16 first (the reference of the paired columns), then the cut f16 rows, then the rest.
  std::stable_partition(matrix.begin(), matrix.end(), [](const TaskMethod& t) { return !t.budgeted; });
  const auto f16_end = std::find_if(matrix.begin(), matrix.end(), [](const TaskMethod& t) { return t.budgeted; });
  out.insert(out.begin(), matrix.begin(), f16_end);
  out.insert(out.end(), f16_end, matrix.end());
  MPKV_CHECK(!out.empty() || !a.imports.empty(), "eval --task: no methods");
  return out;
}

KvByteModel budget_model(const TaskEvalArgs& a, const Model& model) {
  const EvalMatrix m = eval_matrix({a.budget_method}, a.bits, a.plan_dir, a.model);
  MPKV_CHECK(m.methods.size() == 1, "eval --task: --budget-method '" + a.budget_method +
                                        "' must name one method at one bits value (e.g. combined:2.5)");
  KvCacheOptions kv = m.methods[0].kv;
  kv.model = kv_model_identity(model);
  const KvDims dims = model.config().kv_dims();
  return KvByteModel(dims, make_kv_plan(kv, dims));
}

}  // namespace

void run_task_eval(const TaskEvalArgs& a) {
  MPKV_CHECK(a.parallel >= 1 && a.items >= 0, "eval --task: --parallel >= 1 and --task-items >= 0");
  // Everything is read and checked before the first forward pass: the task files first.
  std::vector<TaskFileReport> files;
  for (const std::string& path : a.tasks) {
    TaskFileReport f;
    f.path = path;
    f.items = parse_task_items(read_text_file(path), path);
    if (a.items > 0 && (int)f.items.size() > a.items) f.items.resize(a.items);
    files.push_back(std::move(f));
  }
  // The items are tokenized before the model is built: the longest item's prompt + max_tokens is the
  // run's context, which chooses phi3's longrope factors (docs/models.md, "Longrope").
  const Tokenizer tok = Tokenizer::from_gguf(GgufReader(a.model));
  for (TaskFileReport& f : files)
    for (const TaskItem& it : f.items) f.prompts.push_back(tok.encode(it.prompt, tok.add_bos(), /*parse_special=*/false));
  TaskRunOptions o;
  o.parallel = a.parallel;
  o.sink = a.sink;
  o.threads = a.threads;
  o.on_batch = progress_printer();
  for (TaskFileReport& f : files) {
    for (size_t i = 0; i < f.items.size(); ++i)
      o.n_ctx = std::max(o.n_ctx, (int)f.prompts[i].size() + f.items[i].max_tokens);
  }
  auto model = load_model(a.model, o.n_ctx);
  const std::vector<TaskMethod> methods = task_methods(a, *model);
  const KvByteModel budget = budget_model(a, *model);
  const int train = model->config().n_ctx_train;
  MPKV_CHECK(train <= 0 || o.n_ctx <= train, "eval --task: an item needs " + std::to_string(o.n_ctx) +
                                                  " positions, more than the model's context of " + std::to_string(train));
  for (TaskFileReport& f : files)  // imported rows are checked before the first forward pass too
    for (const std::string& path : a.imports)
      for (TaskRun& r : import_task_runs(read_text_file(path), path, f)) f.runs.push_back(std::move(r));
  for (const TaskFileReport& f : files) {
    std::set<std::string> labels;
    for (const TaskMethod& m : methods) labels.insert(m.label);
    for (const TaskRun& r : f.runs)
      MPKV_CHECK(labels.insert(r.method.label).second,
                 "eval --task: two rows named '" + r.method.label + "' for " + f.path + " (run here or imported twice)");
  }
  for (TaskFileReport& f : files) {
    std::vector<TaskRun> imported = std::move(f.runs);
    f.runs.clear();
    for (const TaskMethod& m : methods) {
      std::fprintf(stderr, "eval --task: %s x %zu items, %s ...\n", f.path.c_str(), f.items.size(), m.label.c_str());
      f.runs.push_back({m, run_task_method(*model, tok, f.items, f.prompts, m, budget, o)});
      const TaskMethodResult& r = f.runs.back().result;
      int k = 0;
      for (const ItemOutcome& it : r.items) k += it.correct;
      std::fprintf(stderr, "eval --task:   %d / %zu right in %.1f s\n", k, r.items.size(), r.seconds);
    }
    for (TaskRun& r : imported) f.runs.push_back(std::move(r));
    order_task_runs(f.runs);
  }
  TaskReportInfo info{a.command, a.model, a.budget_method, a.parallel, a.threads, a.sink,
                      model->config().kv_dims()};
  const std::string md = task_markdown(info, files);
  std::fputs(md.c_str(), stdout);
  if (!a.md.empty()) write_file_atomic(a.md, md);
  if (!a.json.empty()) write_file_atomic(a.json, task_json(info, files));
  if (!a.outputs.empty()) write_file_atomic(a.outputs, task_outputs_jsonl(files));
}

}  // namespace mpkv::cli
