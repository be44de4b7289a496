#include "server/chat_request_setup.h"

#include <algorithm>

namespace mpkv::server {

int effective_reasoning_budget(const CompletionRequest& r, int default_budget) {
  return r.reasoning.budget_tokens && *r.reasoning.budget_tokens >= 0 ? *r.reasoning.budget_tokens : default_budget;
}

ChatTemplateInputs chat_template_inputs(const CompletionRequest& r, int default_budget) {
  ChatTemplateInputs in;
  in.messages = r.messages;
  in.tools = r.tools.tools;
  in.kwargs = r.chat_template_kwargs;
  // A budget of 0 is no thinking: the template's own switch (llama-server does the same). An
  // explicit chat_template_kwargs.enable_thinking still wins, being laid over it.
  in.enable_thinking = effective_reasoning_budget(r, default_budget) != 0;
  return in;
}

bool grammar_after_thinking(const CompletionRequest& r, std::string_view template_source, std::string_view prompt) {
  return r.constraint.has_value() && template_has_thinking(template_source) && prompt_opens_thinking(prompt);
}

std::optional<ChatOutputOptions> chat_output_options(const CompletionRequest& r, std::string_view template_source,
                                                     std::string_view prompt) {
  ChatOutputOptions o;
  o.stream = r.stream;
  o.thinking = r.reasoning.format != ReasoningFormat::none && template_has_thinking(template_source);
  o.starts_in_thinking = o.thinking && prompt_opens_thinking(prompt);
  if (r.tools.choice == ToolChoice::required || r.tools.choice == ToolChoice::named) {
    // The output is the schema's JSON, after the thinking when the prompt opened a block (the
    // grammar starts after it: grammar_after_thinking). Thinking the model opens itself cannot
    // come: the grammar's first token is the JSON's.
    // The thinking is split off whatever reasoning_format says: the calls are read from what follows.
    o.forced = std::make_shared<const ToolRequest>(r.tools);
    o.thinking = o.starts_in_thinking = template_has_thinking(template_source) && prompt_opens_thinking(prompt);
    return o;
  }
  if (r.tools.choice == ToolChoice::automatic) o.tools = detect_tool_call_format(template_source);
  o.parallel_tool_calls = r.tools.parallel_tool_calls;
  if (!o.thinking && o.tools == ToolCallFormat::none) return std::nullopt;
  return o;
}

}  // namespace mpkv::server
