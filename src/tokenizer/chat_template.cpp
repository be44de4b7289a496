#include "tokenizer/chat_template.h"

#include <chrono>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jinja/caps.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "json.h"
#include "util/error.h"

namespace mpkv {

// The engine and the probe of what a template supports; immutable once built, so one parse serves
// every render (each render has its own jinja::context).
struct ChatTemplate::Impl {
  std::string source;
  jinja::program program;
  jinja::caps caps;
  std::string bos, eos;
  bool add_bos = false, add_eos = false;
};

namespace {
using ojson = nlohmann::ordered_json;

ojson parse_json(const std::string& text, const std::string& what) {
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error("chat template: " + what + " is not valid JSON: " + text);
  return j;
}

// A message as llama.cpp's common_chat_msg::to_json_oaicompat writes it: role and content always,
// the rest only when set.
ojson message_json(const ChatMessage& m) {
  ojson j = {{"role", m.role}, {"content", m.content}};
  if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
  if (!m.name.empty()) j["name"] = m.name;
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ChatToolCall& c : m.tool_calls) {
      ojson tc = {{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
      if (!c.id.empty()) tc["id"] = c.id;
      calls.push_back(std::move(tc));
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

// llama.cpp's common_chat_templates_apply_jinja: the message workarounds it applies for what the
// template's probe found (docs/chat_templates.md, "What the template sees").
ojson messages_json(const std::vector<ChatMessage>& messages, const jinja::caps& caps, const std::string& source) {
  ojson out = ojson::array();
  for (const ChatMessage& m : messages) out.push_back(message_json(m));
  // Typed content only: a string becomes one text part.
  if (!caps.supports_string_content && caps.supports_typed_content)
    for (ojson& m : out) m["content"] = ojson::array({{{"type", "text"}, {"text", m["content"]}}});
  if (source.find("<|channel|>") == std::string::npos)  // GPT-OSS alone keeps "developer"
    for (ojson& m : out)
      if (m["role"] == "developer") m["role"] = "system";
  if (!caps.supports_system_role && !out.empty() && out.front()["role"] == "system") {
    if (out.size() > 1 && out[0]["content"].is_string() && out[1]["content"].is_string())
      out[1]["content"] = out[0]["content"].get<std::string>() + "\n" + out[1]["content"].get<std::string>();
    out.erase(out.begin());
  }
  if (caps.supports_object_arguments)
    for (ojson& m : out)
      if (m.contains("tool_calls"))
        for (ojson& tc : m["tool_calls"]) {
          ojson& args = tc["function"]["arguments"];
          if (args.is_string()) args = parse_json(args.get<std::string>(), "tool call arguments");
        }
  return out;
}

ojson tools_json(const std::vector<ChatTool>& tools) {
  ojson out = ojson::array();
  for (const ChatTool& t : tools) {
    ojson params = t.parameters.empty() ? ojson{{"type", "object"}, {"properties", ojson::object()}}
                                        : parse_json(t.parameters, "the parameters of tool '" + t.name + "'");
    out.push_back({{"type", "function"},
                   {"function", {{"name", t.name}, {"description", t.description}, {"parameters", std::move(params)}}}});
  }
  return out;
}

std::string format_time(std::time_t t, const char* format) {
  std::tm local{};
  localtime_r(&t, &local);
  std::ostringstream ss;
  ss << std::put_time(&local, format);
  return ss.str();
}

bool starts_with(const std::string& s, const std::string& p) { return !p.empty() && s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, bool add_bos,
                           bool add_eos) {
  auto impl = std::make_shared<Impl>();
  try {
    jinja::lexer lexer;
    jinja::lexer_result lexed = lexer.tokenize(source);
    impl->program = jinja::parse_from_tokens(lexed);
    impl->source = lexed.source;
    impl->caps = jinja::caps_get(impl->program);
  } catch (const std::exception& e) {
    throw Error(std::string("chat template does not parse: ") + e.what());
  }
  impl->bos = std::move(bos_token);
  impl->eos = std::move(eos_token);
  impl->add_bos = add_bos;
  impl->add_eos = add_eos;
  impl_ = std::move(impl);
}

const std::string& ChatTemplate::source() const { return impl_->source; }
bool ChatTemplate::supports_system_role() const { return impl_->caps.supports_system_role; }
bool ChatTemplate::supports_tools() const { return impl_->caps.supports_tools; }

std::string ChatTemplate::apply(const ChatTemplateInputs& in) const {
  const Impl& t = *impl_;
  const std::time_t now = in.now.value_or(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()));
  // The order of common_chat_template_direct_apply_impl: its fixed variables, tools, then the extra
  // context (datetime, date_string, chat_template_kwargs) over them, then add_generation_prompt.
  ojson vars = {{"messages", messages_json(in.messages, t.caps, t.source)},
                {"bos_token", t.bos},
                {"eos_token", t.eos},
                {"enable_thinking", in.enable_thinking}};
  if (!in.tools.empty()) vars["tools"] = tools_json(in.tools);
  vars["datetime"] = format_time(now, "%b %d %Y");
  vars["date_string"] = format_time(now, "%d %b %Y");
  for (const auto& [name, value] : in.kwargs) vars[name] = parse_json(value, "chat_template_kwargs." + name);
  if (in.add_generation_prompt) vars["add_generation_prompt"] = true;

  std::string out;
  try {
    jinja::context ctx(t.source);
    ctx.current_time = now;
    // Two kwargs llama.cpp also hands to the engine's caps (they stay template variables too).
    if (auto it = vars.find("preserve_reasoning"); it != vars.end() && it->is_boolean())
      jinja::caps_apply_preserve_reasoning(ctx, it->get<bool>());
    if (auto it = vars.find("reasoning_effort"); it != vars.end() && it->is_string() && !it->get<std::string>().empty())
      jinja::caps_apply_reasoning_effort(ctx, it->get<std::string>());
    jinja::global_from_json(ctx, common_json::parse(vars.dump()), /*mark_input=*/true);
    jinja::runtime runtime(ctx);
    const jinja::value results = runtime.execute(t.program);
    out = jinja::runtime::gather_string_parts(results)->as_string().str();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string("chat template failed to render: ") + e.what());
  }
  if (t.add_bos && starts_with(out, t.bos)) out.erase(0, t.bos.size());
  if (t.add_eos && ends_with(out, t.eos)) out.erase(out.size() - t.eos.size());
  return out;
}

}  // namespace mpkv
