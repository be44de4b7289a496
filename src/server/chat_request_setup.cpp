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

std::optional<ChatOutputOptions> chat_output_options(const CompletionRequest& r, std::string_view template_source,
                                                     std::string_view prompt) {
  ChatOutputOptions o;
  if (r.tools.choice == ToolChoice::required || r.tools.choice == ToolChoice::named) {
    o.forced = std::make_shared<const ToolRequest>(r.tools);  // the output is the schema's JSON
    return o;
  }
  o.thinking = r.reasoning.format != ReasoningFormat::none && template_has_thinking(template_source);
  o.starts_in_thinking = o.thinking && prompt_opens_thinking(prompt);
  if (r.tools.choice == ToolChoice::automatic) o.tools = detect_tool_call_format(template_source);
  o.parallel_tool_calls = r.tools.parallel_tool_calls;
  if (!o.thinking && o.tools == ToolCallFormat::none) return std::nullopt;
  return o;
}

}  // namespace mpkv::server
