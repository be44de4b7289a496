#include "server/tool_request.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;

using request_fields::bad;
using request_fields::field;

std::string string_field(const ojson& obj, const std::string& name, const std::string& param, bool required) {
  const ojson* v = field(obj, name);
  if (!v) {
    if (required) throw bad(param, "'" + param + "' is required");
    return "";
  }
  if (!v->is_string()) throw bad(param, "'" + param + "' must be a string");
  return v->get<std::string>();
}

// OpenAI's rule for function names: 1..64 of [a-zA-Z0-9_-] (a name is also what a template writes
// into the prompt and what the parsers look for, so nothing else is let through).
void check_name(const std::string& name, const std::string& param) {
  const bool ok = !name.empty() && name.size() <= kMaxToolNameBytes &&
                  std::all_of(name.begin(), name.end(), [](unsigned char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                  });
  if (!ok) throw bad(param, "'" + param + "' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
}

ChatTool parse_tool(const ojson& t, const std::string& p) {
  if (!t.is_object()) throw bad(p, "'" + p + "' must be an object");
  const std::string type = string_field(t, "type", p + ".type", true);
  if (type != "function") throw bad(p + ".type", "'" + p + ".type' must be \"function\" (the only tool type served)");
  const ojson* f = field(t, "function");
  if (!f || !f->is_object()) throw bad(p + ".function", "'" + p + ".function' must be an object");
  ChatTool tool;
  tool.name = string_field(*f, "name", p + ".function.name", true);
  check_name(tool.name, p + ".function.name");
  tool.description = string_field(*f, "description", p + ".function.description", false);
  if (const ojson* params = field(*f, "parameters")) {
    if (!params->is_object())
      throw bad(p + ".function.parameters", "'" + p + ".function.parameters' must be a JSON Schema object");
    tool.parameters = params->dump();
  }
  if (const ojson* strict = field(*f, "strict"); strict && !strict->is_boolean())
    throw bad(p + ".function.strict", "'" + p + ".function.strict' must be a boolean");
  return tool;
}

std::vector<ChatTool> parse_tools(const ojson& body) {
  const ojson* t = field(body, "tools");
  if (!t) return {};
  if (!t->is_array()) throw bad("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
  if (t->size() > static_cast<size_t>(kMaxTools))
    throw bad("tools", "'tools' holds at most " + std::to_string(kMaxTools) + " tools, got " + std::to_string(t->size()));
  std::vector<ChatTool> tools;
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    tools.push_back(parse_tool((*t)[i], p));
    for (size_t j = 0; j + 1 < tools.size(); ++j)
      if (tools[j].name == tools.back().name)
        throw bad(p + ".function.name", "'" + p + ".function.name': the tool name '" + tools.back().name + "' is given twice");
  }
  return tools;
}

void parse_tool_choice(const ojson& body, ToolRequest& r) {
  r.choice = r.tools.empty() ? ToolChoice::none : ToolChoice::automatic;
  const ojson* c = field(body, "tool_choice");
  if (!c) return;
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") r.choice = ToolChoice::none;
    else if (s == "auto") r.choice = ToolChoice::automatic;
    else if (s == "required") r.choice = ToolChoice::required;
    else throw bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else if (c->is_object()) {
    if (string_field(*c, "type", "tool_choice.type", true) != "function")
      throw bad("tool_choice.type", "'tool_choice.type' must be \"function\"");
    const ojson* f = field(*c, "function");
    if (!f || !f->is_object()) throw bad("tool_choice.function", "'tool_choice.function' must be an object with a name");
    r.named = string_field(*f, "name", "tool_choice.function.name", true);
    r.choice = ToolChoice::named;
    const bool known = std::any_of(r.tools.begin(), r.tools.end(), [&](const ChatTool& t) { return t.name == r.named; });
    if (!known)
      throw bad("tool_choice.function.name", "'tool_choice.function.name' names '" + r.named + "', which is not one of 'tools'");
  } else {
    throw bad("tool_choice", "'tool_choice' must be a string or an object");
  }
  if ((r.choice == ToolChoice::required || r.choice == ToolChoice::named) && r.tools.empty())
    throw bad("tool_choice", "'tool_choice' \"required\" or a named function needs 'tools'");
}

// A call's arguments: a string holding a JSON object (OpenAI's form) or the object itself (some
// clients send it parsed); kept as JSON text in the order written.
std::string call_arguments(const ojson& fn, const std::string& p) {
  const ojson* a = field(fn, "arguments");
  if (!a) throw bad(p, "'" + p + "' is required");
  if (a->is_object()) return a->dump();
  if (!a->is_string()) throw bad(p, "'" + p + "' must be a string of JSON");
  const std::string text = a->get<std::string>();
  const ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) throw bad(p, "'" + p + "' must be a JSON object (as text)");
  return text;
}

ChatToolCall parse_call(const ojson& tc, const std::string& p) {
  if (!tc.is_object()) throw bad(p, "'" + p + "' must be an object");
  ChatToolCall call;
  call.id = string_field(tc, "id", p + ".id", false);
  if (string_field(tc, "type", p + ".type", false) != "function" && field(tc, "type"))
    throw bad(p + ".type", "'" + p + ".type' must be \"function\"");
  const ojson* fn = field(tc, "function");
  if (!fn || !fn->is_object()) throw bad(p + ".function", "'" + p + ".function' must be an object");
  call.name = string_field(*fn, "name", p + ".function.name", true);
  check_name(call.name, p + ".function.name");
  call.arguments = call_arguments(*fn, p + ".function.arguments");
  return call;
}
}  // namespace

ToolRequest parse_tool_request(const ojson& body) {
  for (const char* legacy : {"functions", "function_call"})
    if (const ojson* v = field(body, legacy); v && !(v->is_array() && v->empty()))
      throw bad(legacy, std::string("'") + legacy +
                            "' (OpenAI's deprecated function calling) is not supported; send 'tools' and 'tool_choice'");
  ToolRequest r;
  r.tools = parse_tools(body);
  parse_tool_choice(body, r);
  if (const ojson* p = field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    r.parallel_tool_calls = p->get<bool>();
  }
  return r;
}

void parse_message_tool_fields(const ojson& msg, const std::string& role, const std::string& param, ChatMessage& out) {
  if (role == "tool") {
    out.tool_call_id = string_field(msg, "tool_call_id", param + ".tool_call_id", true);
    out.name = string_field(msg, "name", param + ".name", false);
    return;
  }
  if (field(msg, "tool_call_id")) throw bad(param + ".tool_call_id", "'" + param + ".tool_call_id' is only read on role 'tool'");
  const ojson* calls = field(msg, "tool_calls");
  if (!calls) return;
  if (role != "assistant") throw bad(param + ".tool_calls", "'" + param + ".tool_calls' is only read on role 'assistant'");
  if (!calls->is_array()) throw bad(param + ".tool_calls", "'" + param + ".tool_calls' must be an array");
  if (calls->size() > static_cast<size_t>(kMaxToolCallsPerMessage))
    throw bad(param + ".tool_calls", "'" + param + ".tool_calls' holds at most " + std::to_string(kMaxToolCallsPerMessage) + " calls");
  for (size_t i = 0; i < calls->size(); ++i)
    out.tool_calls.push_back(parse_call((*calls)[i], param + ".tool_calls[" + std::to_string(i) + "]"));
}

}  // namespace mpkv::server
