// `mpkv eval`'s outputs: one markdown report (stdout and --md) and one JSON file (--json, read by
// scripts/plot_eval.py), from the rows and drift curves of eval_protocols.h.
#pragma once
#include <string>
#include <vector>

#include "eval/eval_protocols.h"

namespace mpkv::cli {

struct EvalReportInfo {
  std::string command, model, file;
  int n_ctx = 0, windows = 0, threads = 0;
  size_t tokens_in_file = 0;
  std::vector<std::string> skipped;
  double seconds = 0;
  BootstrapOptions ci;  // how the rows' intervals were made
};

// What the drift generation was: its chat prompt and the reference's text.
struct DriftText {
  std::string prompt, generated;
};

std::string eval_markdown(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                          const DriftText& text);
std::string eval_json(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                      const DriftText& text);

}  // namespace mpkv::cli
