// Real chat templates (llama.cpp's models/templates, extracted by scripts/get_jinja.sh) rendered
// with the message sets of tests/golden/chat_templates/cases.json. Every render must succeed; the
// prompts are compared with tests/golden/chat_templates/llama_cpp.json, llama-server's own
// /apply-template output made by scripts/make_chat_template_golden.sh, when that file exists
// (docs/chat_templates.md, "Checked against llama.cpp"). bos_token / eos_token are SmolLM2's, the
// model that script serves the templates with.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {
// Ordered, as the script sends cases.json to llama-server: a tool schema's keys reach the template in
// the order they were written (llama.cpp keeps JSON key order).
using json = nlohmann::ordered_json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplateInputs inputs_of(const json& c) {
  ChatTemplateInputs in;
  for (const json& m : c["messages"]) {
    ChatMessage msg(m["role"], m.value("content", ""));
    msg.tool_call_id = m.value("tool_call_id", "");
    msg.name = m.value("name", "");
    for (const json& tc : m.value("tool_calls", json::array()))
      msg.tool_calls.push_back({tc.value("id", ""), tc["function"]["name"], tc["function"]["arguments"]});
    in.messages.push_back(std::move(msg));
  }
  for (const json& t : c.value("tools", json::array()))
    in.tools.push_back({t["function"]["name"], t["function"].value("description", ""), t["function"]["parameters"].dump()});
  const json kwargs = c.value("chat_template_kwargs", json::object());  // items() must not outlive it
  for (const auto& [k, v] : kwargs.items()) in.kwargs.emplace_back(k, v.dump());
  return in;
}

TEST(ChatTemplateGolden, RealTemplatesRenderAndMatchLlamaCpp) {
  const std::string dir = test::source_path("tests/golden/chat_templates");
  const json cases = json::parse(slurp(dir + "/cases.json"));
  const std::string model = test::default_model_path();
  if (model.empty()) GTEST_SKIP() << "default model absent (its BOS/EOS texts are the golden files')";
  GgufReader g(model);
  const Tokenizer tok = Tokenizer::from_gguf(g);
  const std::string bos = tok.token_piece(tok.bos()), eos = tok.token_piece(tok.eos());
  const std::string golden_text = slurp(dir + "/llama_cpp.json");
  const json golden = golden_text.empty() ? json() : json::parse(golden_text);
  setenv("TZ", "UTC", 1);  // strftime_now: the golden file's day, in UTC as the script runs llama-server
  tzset();
  int rendered = 0, compared = 0;
  for (const json& name : cases["templates"]) {
    const std::string src = slurp(std::string(MPKV_JINJA_TEMPLATES) + "/" + name.get<std::string>());
    if (src.empty()) GTEST_SKIP() << "templates absent: run scripts/get_jinja.sh";
    SCOPED_TRACE(name.get<std::string>());
    const ChatTemplate t(src, bos, eos, tok.add_bos());
    for (const json& c : cases["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>());
      ChatTemplateInputs in = inputs_of(c);
      if (!golden.is_null()) in.now = golden["made_at"].get<std::time_t>();
      const std::string key = name.get<std::string>() + "/" + c["name"].get<std::string>();
      if (cases["raises"].contains(key)) {  // the template itself refuses this message set
        try {
          t.apply(in);
          ADD_FAILURE() << key << " rendered; the template should raise";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(cases["raises"][key].get<std::string>()), std::string::npos) << e.what();
        }
        continue;
      }
      std::string prompt;
      ASSERT_NO_THROW(prompt = t.apply(in));
      EXPECT_FALSE(prompt.empty());
      ++rendered;
      if (!golden.is_null() && golden["prompts"].contains(key)) {
        EXPECT_EQ(prompt, golden["prompts"][key].get<std::string>());
        ++compared;
      }
    }
  }
  if (golden.is_null())
    GTEST_SKIP() << rendered << " prompts rendered; none compared: no tests/golden/chat_templates/llama_cpp.json "
                 << "(scripts/make_chat_template_golden.sh makes it where llama-server is built)";
  EXPECT_EQ(compared, rendered) << "the golden file lacks some template/case pairs: remake it";
}

}  // namespace
}  // namespace mpkv
