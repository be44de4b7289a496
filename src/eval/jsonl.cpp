// JSONL lines (jsonl.h).
#include "eval/jsonl.h"

#include <sstream>

#include "util/error.h"

namespace mpkv {

void for_each_jsonl_line(const std::string& jsonl, const std::string& source,
                         const std::function<void(const nlohmann::json&, const std::string& where)>& fn) {
  std::istringstream in(jsonl);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not valid JSON (" + e.what() + ")");
    }
    fn(j, where);
  }
}

}  // namespace mpkv
