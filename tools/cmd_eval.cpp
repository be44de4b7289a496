// mpkv eval: quality of KV methods side by side (eval_protocols.h): a methods x bits matrix under
// the decode and prefill-fake protocols on a text, and/or long-generation drift. Writes markdown
// (stdout, --md) and JSON (--json) for scripts/plot_eval.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli_util.h"
#include "cli_options.h"
#include "commands.h"
#include "eval/eval_methods.h"
#include "eval/eval_protocols.h"
#include "eval_report.h"
#include "eval_task.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

struct EvalArgs {
  // Default plans: the repository's (MPKV_SOURCE_DIR, set by CMake), whatever the current folder.
  std::string model, file, json, md, plan_dir = MPKV_SOURCE_DIR "/docs/results/plans";
  std::string drift_prompt = "Write a long, detailed story about a lighthouse keeper who finds a map in a bottle.";
  std::vector<std::string> methods{"f16", "uniform", "kivi", "progressive", "pmkvq", "ratequant", "combined"};
  std::vector<double> bits{2, 2.5, 3, 4};
  std::vector<std::string> protocols{"decode", "prefill-fake"};
  std::vector<std::string> drift_methods;
  std::vector<double> drift_bits;
  int n_ctx = 2048, windows = 2, threads = 0, drift_tokens = 0, drift_bucket = 256;
  BootstrapOptions ci;
  TaskEvalArgs task;  // --task mode (eval_task.h)
};

// --task mode: the task options and the shared ones (model, methods, bits, plans, threads, outputs).
void run_task_mode(const EvalArgs& a, const CLI::App* sub) {
  MPKV_CHECK(a.file.empty() && a.drift_tokens == 0, "eval: --task does not combine with -f or --drift-tokens");
  MPKV_CHECK(!given(sub, "--protocols") && !given(sub, "--windows") && !given(sub, "--ctx"),
             "eval: --protocols, --windows and -c are for -f; --task takes each item's own length");
  TaskEvalArgs t = a.task;
  t.model = a.model;
  t.plan_dir = a.plan_dir;
  // With --import and no --methods, only the imported rows are reported (no forward pass).
  if (!t.imports.empty() && !given(sub, "--methods")) t.methods.clear();
  else t.methods = a.methods;
  t.bits = a.bits;
  t.json = a.json;
  t.md = a.md;
  t.threads = apply_threads(a.threads);
  t.command = command_line();
  run_task_eval(t);
}

// The matrix without f16 (the reference of every protocol), with model identity for plan checks.
EvalMatrix methods_for(const std::vector<std::string>& names, const std::vector<double>& bits, const EvalArgs& a,
                       const Model& model) {
  EvalMatrix m = eval_matrix(names, bits, a.plan_dir, a.model);
  std::vector<EvalMethod> kept;
  for (EvalMethod& e : m.methods) {
    if (e.kv.method == KvMethod::f16 && e.kv.plan_file.empty()) continue;  // the reference
    e.kv.model = kv_model_identity(model);
    kept.push_back(e);
  }
  m.methods = kept;
  return m;
}

}  // namespace

void register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "KV methods x bits side by side: decode / prefill-fake quality, drift");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-f,--file", a->file, "text for perplexity / KL (omit to run only --drift-tokens)");
  sub->add_option("--methods", a->methods, "f16 uniform kivi rotated turbo progressive pmkvq ratequant combined split plan:NAME; name:b pins bits")
      ->delimiter(',')->capture_default_str();
  sub->add_option("--bits", a->bits, "average bits (multiples of 0.5)")->delimiter(',')->capture_default_str();
  sub->add_option("--protocols", a->protocols, "decode, prefill-fake")->delimiter(',')->capture_default_str();
  sub->add_option("--plan-dir", a->plan_dir, "where <method>_<bits>.json plans of pmkvq/ratequant/combined are")
      ->capture_default_str();
  sub->add_option("-c,--ctx,--ctx-size", a->n_ctx, "window size; the second half of each window is scored")
      ->capture_default_str()->check(integer_in(8, 1 << 20, "in [8, 1048576]"));
  sub->add_option("--windows", a->windows, "windows of the text decoded together")
      ->capture_default_str()->check(integer_in(1, 4096, "in [1, 4096]"));
  sub->add_option("--drift-tokens", a->drift_tokens, "greedy tokens for the drift curves (0: none)")
      ->capture_default_str()->check(integer_in(0, 1 << 20, "in [0, 1048576]"));
  sub->add_option("--drift-prompt", a->drift_prompt, "chat prompt of the drift generation")->capture_default_str();
  sub->add_option("--drift-methods", a->drift_methods, "methods for drift (default: --methods)")->delimiter(',');
  sub->add_option("--drift-bits", a->drift_bits, "bits for drift (default: --bits)")->delimiter(',');
  sub->add_option("--drift-bucket", a->drift_bucket, "generated positions per drift point")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
  sub->add_option("--ci-block", a->ci.block, "scored positions per bootstrap block (consecutive, one window)")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
  sub->add_option("--ci-resamples", a->ci.resamples, "bootstrap resamples of the 95% intervals")
      ->capture_default_str()->check(integer_in(10, 1000000, "in [10, 1000000]"));
  sub->add_option("--task", a->task.tasks, "task files (JSONL, scripts/make_tasks.py): exact-match accuracy instead of -f")
      ->delimiter(',');
  sub->add_option("--task-items", a->task.items, "first N items of each task file (0: all)")
      ->capture_default_str()->check(integer_in(0, 1 << 24, ">= 0"));
  sub->add_option("--budget-method", a->task.budget_method, "--task: the method whose byte bound is every row's KV budget")
      ->capture_default_str();
  sub->add_option("--parallel", a->task.parallel, "--task: items decoding at once")
      ->capture_default_str()->check(integer_in(1, 4096, "in [1, 4096]"));
  sub->add_option("--evict-sink", a->task.sink, "--task: tokens f16-evict keeps at the start of the prompt")
      ->capture_default_str()->check(integer_in(0, 1 << 20, ">= 0"));
  sub->add_option("--outputs", a->task.outputs, "--task: write every item's generated text and score (JSONL)");
  sub->add_option("--import", a->task.imports,
                  "--task: rows read back from --outputs files of earlier runs, scored again and paired with f16")
      ->delimiter(',');
  add_threads_option(sub, a->threads);
  sub->add_option("--json", a->json, "write the results as JSON");
  sub->add_option("--md", a->md, "write the markdown report to this file too");
  sub->callback([a, sub] {
    if (!a->task.tasks.empty()) return run_task_mode(*a, sub);
    const auto t0 = std::chrono::steady_clock::now();
    MPKV_CHECK(!a->file.empty() || a->drift_tokens > 0, "eval: give a text with -f, or --drift-tokens N, or both");
    bool decode = false, fake = false;
    for (const auto& p : a->protocols) {
      MPKV_CHECK(p == "decode" || p == "prefill-fake", "eval: unknown protocol '" + p + "' (decode, prefill-fake)");
      decode |= p == "decode";
      fake |= p == "prefill-fake";
    }
    const int threads = apply_threads(a->threads);
    // The longest sequence this run holds: a text window, or the greedy drift run (its short chat
    // prompt aside); it chooses phi3's longrope factors (docs/models.md, "Longrope").
    auto model = load_model(a->model, std::max(a->file.empty() ? 0 : a->n_ctx, a->drift_tokens));
    const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
    // Every method, plan and text is checked before the first forward pass.
    const EvalMatrix text_m = methods_for(a->methods, a->bits, *a, *model);
    const EvalMatrix drift_m = methods_for(a->drift_methods.empty() ? a->methods : a->drift_methods,
                                           a->drift_bits.empty() ? a->bits : a->drift_bits, *a, *model);
    const ModelConfig& c = model->config();
    const KvDims dims = c.kv_dims();
    bool warned = false;  // one warning for the first method whose plan quantizes nothing at -c
    for (const auto* mm : {&text_m, &drift_m})
      for (const EvalMethod& e : mm->methods) {
        const KvPlan plan = make_kv_plan(e.kv, dims);
        if (!warned && mm == &text_m && !a->file.empty() && plan.method != KvPlanMethod::f16 && a->n_ctx <= plan.sink + plan.min_fp16_window()) {
          warn_if_nothing_quantized(plan, a->n_ctx);
          warned = true;
        }
      }
    std::vector<int32_t> tokens;
    if (!a->file.empty()) {
      tokens = tok.encode(read_text_file(a->file), tok.add_bos(), /*parse_special=*/false);
      MPKV_CHECK((int64_t)tokens.size() >= (int64_t)a->windows * a->n_ctx,
                 "eval: " + a->file + " has " + std::to_string(tokens.size()) + " tokens, fewer than --windows " +
                     std::to_string(a->windows) + " x --ctx " + std::to_string(a->n_ctx));
    }
    EvalReportInfo info;
    info.command = command_line();
    info.model = a->model;
    info.file = a->file;
    info.n_ctx = a->n_ctx;
    info.windows = a->windows;
    info.threads = threads;
    info.tokens_in_file = tokens.size();
    info.skipped = text_m.skipped;
    info.ci = a->ci;

    std::vector<EvalRow> rows;
    if (!a->file.empty()) {
      TextEvalOptions o;
      o.n_ctx = a->n_ctx;
      o.windows = a->windows;
      o.add_bos = tok.add_bos();
      o.bos = tok.bos();
      o.bootstrap = a->ci;
      std::fprintf(stderr, "eval: %zu methods, %d windows of %d tokens of %s\n", text_m.methods.size(), a->windows,
                   a->n_ctx, a->file.c_str());
      if (decode)
        for (auto& r : eval_decode(*model, tokens, text_m.methods, o)) rows.push_back(r);
      if (fake)
        for (auto& r : eval_prefill_fake(*model, tokens, text_m.methods, o)) rows.push_back(r);
    }
    std::unique_ptr<DriftResult> drift;
    if (a->drift_tokens > 0) {
      const std::string text = tok.format_chat({{"user", a->drift_prompt}}, true);
      const auto prompt = tok.encode(text, tok.add_bos(), /*parse_special=*/true);
      DriftOptions d;
      d.n_tokens = a->drift_tokens;
      d.bucket = a->drift_bucket;
      std::fprintf(stderr, "eval: drift over %d greedy tokens, %zu methods\n", d.n_tokens, drift_m.methods.size());
      drift = std::make_unique<DriftResult>(
          eval_drift(*model, prompt, drift_m.methods, d, [&](int32_t id) { return tok.is_end_of_generation(id); }));
      for (const auto& s : drift_m.skipped) info.skipped.push_back("drift " + s);
    }
    info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    DriftText dt{a->drift_prompt, drift ? tok.decode(drift->generated) : std::string()};
    const std::string md = eval_markdown(info, rows, drift.get(), dt);
    std::fputs(md.c_str(), stdout);
    if (!a->md.empty()) write_file_atomic(a->md, md);
    if (!a->json.empty()) write_file_atomic(a->json, eval_json(info, rows, drift.get(), dt));
  });
}

}  // namespace mpkv::cli
