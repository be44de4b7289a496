// `mpkv eval --task ... --import FILE.jsonl`: rows read back from per-item outputs (the `--outputs`
// JSONL of an earlier `mpkv eval --task` run, or of bench/peer_task_llamacpp.py), so that rows run
// in separate processes (or by another engine) are reported and paired with the f16 row of the
// same items (docs/accuracy_tasks.md "Rows from several runs").
//
// One line per (method, item), the fields `--outputs` writes:
//   {"method": "kivi-2", "id": "passkey_1024_3", "answer": "48213", "generated": " 48213.",
//    "prompt_tokens": 931, "kept_tokens": 931, "generated_tokens": 4, "budget_bytes": 861184,
//    "over_budget": false, "bits": 2, "budgeted": true, "policy": "full",
//    "peak_bits_per_elem": 5.76, "context_bits_per_elem": 5.76, "seconds": 507.0, ...}
// Every answer is scored again with the item's rule (eval/answer_rule.h): a line's own "correct" is
// ignored, so one rule scores every row whoever generated it.
#pragma once
#include <string>
#include <vector>

#include "task_report.h"

namespace mpkv::cli {

// The rows of `jsonl` (named `source` in errors) for the items of `f` (matched by id; lines whose
// id is not among f's items belong to other files and are skipped). Input error for bad JSON, a
// missing or mistyped field, a method that has some of f's items but not all, an item given twice,
// an answer or prompt length that differs from f's item (another task file or tokenizer), or a
// method whose lines disagree on its row fields.
std::vector<TaskRun> import_task_runs(const std::string& jsonl, const std::string& source, const TaskFileReport& f);

// Puts the f16 row (is_f16_reference) first, where the paired columns look for it; the other rows
// keep their order.
void order_task_runs(std::vector<TaskRun>& runs);

}  // namespace mpkv::cli
