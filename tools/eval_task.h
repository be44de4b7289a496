// `mpkv eval --task FILE...`: exact-match accuracy of KV methods on generated tasks at equal KV
// memory (docs/accuracy_tasks.md). Each file's items run once per method through the serving
// engine (eval/task_run.h); the report has one table per file with Wilson intervals and paired
// McNemar comparisons against the f16 row. Rows may also be read back from the per-item outputs
// of earlier runs (--import), then reported beside the ones run here.
#pragma once
#include <string>
#include <vector>

namespace mpkv::cli {

struct TaskEvalArgs {
  std::string model, plan_dir, json, md, outputs;
  std::vector<std::string> tasks, methods;
  std::vector<std::string> imports;  // --outputs files of earlier runs read back as rows (task_import.h)
  std::vector<double> bits;
  std::string budget_method = "combined:2.5";
  int items = 0;     // first N items of each file (0: all)
  int parallel = 1;  // items decoding at once
  int sink = 4;      // f16-evict's sink tokens
  int threads = 1;
  std::string command;
};

void run_task_eval(const TaskEvalArgs& a);

}  // namespace mpkv::cli
