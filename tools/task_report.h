// The report of `mpkv eval --task` (eval_task.h): markdown tables, JSON, and per-item outputs.
#pragma once
#include <string>
#include <vector>

#include "eval/task_run.h"

namespace mpkv::cli {

struct TaskRun {
  TaskMethod method;
  TaskMethodResult result;
};

// The f16 row with the whole prompt and no budget, the reference of the paired columns.
bool is_f16_reference(const TaskRun& r);

struct TaskFileReport {
  std::string path;
  std::vector<TaskItem> items;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<TaskRun> runs;  // runs[0] is the paired reference when it is the f16 row
};

struct TaskReportInfo {
  std::string command, model, budget_method;
  int parallel = 1, threads = 1, sink = 4;
  KvDims dims;
};

// One section per file: the accuracy table (Wilson 95%, paired difference and exact McNemar
// p against the f16 row) and, for files whose items carry several depths, accuracy by depth.
std::string task_markdown(const TaskReportInfo& info, const std::vector<TaskFileReport>& files);
std::string task_json(const TaskReportInfo& info, const std::vector<TaskFileReport>& files);
// One line per (file, method, item): id, correct, the extracted answer, the generated text.
std::string task_outputs_jsonl(const std::vector<TaskFileReport>& files);

}  // namespace mpkv::cli
