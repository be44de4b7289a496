// JSONL task files (task_items.h).
#include "eval/task_items.h"

#include <nlohmann/json.hpp>
#include <set>

#include "eval/jsonl.h"
#include "util/error.h"

namespace mpkv {

namespace {

using nlohmann::json;

TaskItem parse_item(const json& j, const std::string& where) {
  MPKV_CHECK(j.is_object(), where + ": not a JSON object");
  auto str = [&](const char* k, bool required) {
    if (!j.contains(k)) {
      MPKV_CHECK(!required, where + ": missing \"" + k + "\"");
      return std::string();
    }
    MPKV_CHECK(j[k].is_string(), where + ": \"" + k + "\" must be a string");
    return j[k].get<std::string>();
  };
  TaskItem it;
  it.id = str("id", true);
  it.task = str("task", false);
  it.prompt = str("prompt", true);
  it.answer = str("answer", true);
  it.rule = parse_answer_rule(str("rule", true));
  MPKV_CHECK(!it.prompt.empty(), where + ": empty \"prompt\"");
  MPKV_CHECK(j.contains("max_tokens") && j["max_tokens"].is_number_integer(), where + ": \"max_tokens\" must be an integer");
  const long long mt = j["max_tokens"].get<long long>();
  MPKV_CHECK(mt >= 1 && mt <= (1 << 20), where + ": \"max_tokens\" must be in [1, 1048576]");
  it.max_tokens = (int)mt;
  if (j.contains("stop")) {
    MPKV_CHECK(j["stop"].is_array(), where + ": \"stop\" must be an array of strings");
    for (const json& s : j["stop"]) {
      MPKV_CHECK(s.is_string() && !s.get<std::string>().empty(), where + ": \"stop\" must hold non-empty strings");
      it.stop.push_back(s.get<std::string>());
    }
  }
  if (j.contains("length")) {
    MPKV_CHECK(j["length"].is_number_integer() && j["length"].get<long long>() >= 0, where + ": \"length\" must be an integer >= 0");
    it.length = (int)j["length"].get<long long>();
  }
  if (j.contains("depth")) {
    MPKV_CHECK(j["depth"].is_number() && j["depth"].get<double>() >= 0 && j["depth"].get<double>() <= 1,
               where + ": \"depth\" must be a number in [0, 1]");
    it.depth = j["depth"].get<double>();
  }
  return it;
}

}  // namespace

std::vector<TaskItem> parse_task_items(const std::string& jsonl, const std::string& source) {
  std::vector<TaskItem> items;
  std::set<std::string> ids;
  for_each_jsonl_line(jsonl, source, [&](const json& j, const std::string& where) {
    TaskItem it;
    try {
      it = parse_item(j, where);
    } catch (const Error& e) {
      throw Error(std::string(e.what()).find(where) == 0 ? e.what() : where + ": " + e.what());
    }
    MPKV_CHECK(ids.insert(it.id).second, where + ": duplicate id '" + it.id + "'");
    items.push_back(std::move(it));
  });
  MPKV_CHECK(!items.empty(), source + ": no task items (one JSON object per line)");
  return items;
}

}  // namespace mpkv
