// Items of a task file for `mpkv eval --task` (docs/accuracy_tasks.md "Task files"): JSONL, one
// JSON object per line, as scripts/make_tasks.py writes them:
//   {"id": "passkey_2048_3", "task": "passkey", "prompt": "...", "answer": "48213",
//    "max_tokens": 12, "stop": ["\n"], "rule": "first_number", "length": 2048, "depth": 0.3}
// id, prompt, answer, max_tokens and rule are required; stop, task, length and depth optional.
#pragma once
#include <string>
#include <vector>

#include "eval/answer_rule.h"

namespace mpkv {

struct TaskItem {
  std::string id, task, prompt, answer;
  int max_tokens = 0;
  std::vector<std::string> stop;
  AnswerRule rule = AnswerRule::first_number;
  int length = 0;      // the generator's target length in tokens (0: none)
  double depth = 0.0;  // where the needle sits, 0 = start of the context, 1 = end
};

// Parses the JSONL text (empty lines skipped). Input error naming `source` and the line for bad
// JSON, a missing or mistyped field, max_tokens outside [1, 1 << 20], an empty prompt or a
// duplicate id; an empty file is an error too. Nothing is returned unless every line is valid.
std::vector<TaskItem> parse_task_items(const std::string& jsonl, const std::string& source);

}  // namespace mpkv
