#include "server/tool_schema.h"

#include <nlohmann/json.hpp>

#include "server/json_scan.h"
#include "util/error.h"

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;

ojson parameters_schema(const ChatTool& t) {
  return t.parameters.empty() ? ojson{{"type", "object"}} : ojson::parse(t.parameters);  // checked JSON at parse time
}

const ChatTool* find_tool(const ToolRequest& r, const std::string& name) {
  for (const ChatTool& t : r.tools)
    if (t.name == name) return &t;
  return nullptr;
}
}  // namespace

std::string forced_tool_call_schema(const ToolRequest& r) {
  if (r.choice == ToolChoice::named) {
    const ChatTool* t = find_tool(r, r.named);
    MPKV_ASSERT(t, "forced_tool_call_schema: the named tool was checked to exist");
    return parameters_schema(*t).dump();
  }
  MPKV_ASSERT(r.choice == ToolChoice::required, "forced_tool_call_schema: only for tool_choice required or named");
  ojson any = ojson::array();
  for (const ChatTool& t : r.tools)
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"type", "string"}, {"enum", {t.name}}}}, {"parameters", parameters_schema(t)}}},
                   {"required", {"name", "parameters"}}});
  ojson schema = {{"type", "array"}, {"minItems", 1}};
  if (!r.parallel_tool_calls) schema["maxItems"] = 1;
  schema["items"] = {{"anyOf", any}};
  return schema.dump();
}

// The arguments are the model's own text without whitespace (minify_json), as tool_choice auto gives
// them, so a stream's pieces (tool_call_stream.h) concatenate to them.
std::vector<ParsedToolCall> tool_calls_from_forced_output(const ToolRequest& r, std::string_view output,
                                                          const std::string& id_prefix) {
  const ojson j = ojson::parse(output, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error("the constrained tool-call output is not complete JSON");
  std::vector<ParsedToolCall> calls;
  if (r.choice == ToolChoice::named) {
    if (!j.is_object()) throw Error("the constrained arguments of '" + r.named + "' are not a JSON object");
    calls.push_back({id_prefix + "0", r.named, minify_json(output)});
    return calls;
  }
  MPKV_ASSERT(r.choice == ToolChoice::required, "tool_calls_from_forced_output: only for tool_choice required or named");
  if (!j.is_array() || j.empty()) throw Error("the constrained tool calls are not a non-empty JSON array");
  size_t pos = skip_json_space(output, skip_json_space(output, 0) + 1);  // past '['
  for (const ojson& item : j) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string() || !find_tool(r, item["name"].get<std::string>()))
      throw Error("a constrained tool call does not name one of the tools: " + item.dump());
    if (item.contains("parameters") && !item["parameters"].is_object())
      throw Error("the parameters of a constrained tool call are not a JSON object");
    const size_t end = json_container_end(output, pos);  // the item's text (j parsed: it is there)
    std::string args = "{}";
    for (const auto& [key, value] : json_object_members(output.substr(pos, end - pos)))
      if (key == "parameters") {
        args = minify_json(value);
        break;
      }
    calls.push_back({id_prefix + std::to_string(calls.size()), item["name"].get<std::string>(), std::move(args)});
    pos = skip_json_space(output, end);
    if (pos < output.size() && output[pos] == ',') pos = skip_json_space(output, pos + 1);
  }
  return calls;
}

}  // namespace mpkv::server
