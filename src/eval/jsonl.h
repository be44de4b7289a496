// JSONL reading shared by the task files (task_items.h) and the rows read back by
// `mpkv eval --task --import` (tools/task_import.h): one JSON object per line, blank lines skipped.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace mpkv {

// Calls fn(object, where) for every non-blank line, `where` = "source:line" for error messages.
// Input error naming the line for one that is not valid JSON.
void for_each_jsonl_line(const std::string& jsonl, const std::string& source,
                         const std::function<void(const nlohmann::json&, const std::string& where)>& fn);

}  // namespace mpkv
