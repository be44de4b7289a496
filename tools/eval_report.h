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
};

std::string eval_markdown(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                          const std::string& drift_prompt);
std::string eval_json(const EvalReportInfo& info, const std::vector<EvalRow>& rows, const DriftResult* drift,
                      const std::string& drift_prompt);

}  // namespace mpkv::cli
