// mpkv's tool-call and thinking parsers against llama.cpp's (docs/serving.md, "Tool calls"): every
// model output of tests/golden/tool_calls/cases.json, for the template it names (llama.cpp's
// models/templates), parsed as the server parses a chat answer with tools and tool_choice auto,
// must give llama.cpp's content, reasoning_content and tool calls (name; arguments equal as JSON,
// key order included) as recorded in llama_cpp.json by scripts/make_tool_call_golden.sh. Where
// llama.cpp refuses an output (it answers an error: "does not match the expected format"), mpkv
// gives the whole output back as content instead (chat_output.h), and that is what is checked.
// Skips, saying so, while llama_cpp.json has not been made.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/chat_output.h"
#include "tokenizer/chat_template.h"

using namespace mpkv;
using namespace mpkv::server;
using ojson = nlohmann::ordered_json;

namespace {
std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kDir = std::string(MPKV_SOURCE_DIR) + "/tests/golden/tool_calls/";

// The answer mpkv's server gives for `output` when the request was spec's messages and tools.
ChatDelta mpkv_parse(const ojson& spec, const ojson& c) {
  const std::string src = read(std::string(MPKV_JINJA_TEMPLATES) + "/" + c["template"].get<std::string>());
  ChatTemplateInputs in;
  for (const ojson& m : spec["messages"]) in.messages.emplace_back(m["role"].get<std::string>(), m["content"].get<std::string>());
  for (const ojson& t : spec["tools"])
    in.tools.push_back({t["function"]["name"], t["function"].value("description", ""), t["function"]["parameters"].dump()});
  in.enable_thinking = c.value("enable_thinking", true);
  const std::string prompt = ChatTemplate(src, "<s>", "</s>", false).apply(in);
  ChatOutputOptions o;
  o.tools = detect_tool_call_format(src);
  o.thinking = template_has_thinking(src);
  o.starts_in_thinking = o.thinking && prompt_opens_thinking(prompt);
  ChatOutputParser p(o);
  ChatDelta d = p.push(c["output"].get<std::string>());
  ChatDelta end = p.finish();
  d.reasoning += end.reasoning;
  d.content += end.content;
  d.tool_calls = end.tool_calls;
  return d;
}
}  // namespace

TEST(ToolCallGolden, AgreesWithLlamaCpp) {
  if (!std::filesystem::exists(kDir + "llama_cpp.json"))
    GTEST_SKIP() << "tests/golden/tool_calls/llama_cpp.json is absent (scripts/make_tool_call_golden.sh makes it)";
  const ojson spec = ojson::parse(read(kDir + "cases.json"));
  const ojson golden = ojson::parse(read(kDir + "llama_cpp.json"))["results"];
  ASSERT_EQ(golden.size(), spec["cases"].size()) << "cases.json changed: run scripts/make_tool_call_golden.sh";
  int compared = 0, refused = 0;
  for (const ojson& c : spec["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    ASSERT_TRUE(golden.contains(name));
    const ojson& g = golden[name];
    const ChatDelta d = mpkv_parse(spec, c);
    if (g.contains("error")) {  // llama.cpp refuses it; mpkv keeps it as content
      ++refused;
      EXPECT_TRUE(d.tool_calls.empty());
      EXPECT_EQ(d.content, c["output"].get<std::string>());
      continue;
    }
    ++compared;
    EXPECT_EQ(d.content, g["content"].get<std::string>());
    EXPECT_EQ(d.reasoning, g["reasoning_content"].get<std::string>());
    ASSERT_EQ(d.tool_calls.size(), g["tool_calls"].size());
    for (size_t i = 0; i < d.tool_calls.size(); ++i) {
      EXPECT_EQ(d.tool_calls[i].name, g["tool_calls"][i]["name"].get<std::string>());
      EXPECT_EQ(ojson::parse(d.tool_calls[i].arguments), ojson::parse(g["tool_calls"][i]["arguments"].get<std::string>()))
          << d.tool_calls[i].arguments << " vs " << g["tool_calls"][i]["arguments"];
    }
  }
  std::printf("tool-call golden: %d outputs compared with llama.cpp's parse, %d that llama.cpp refuses\n", compared, refused);
}
