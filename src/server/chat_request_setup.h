// From a parsed chat request to what renders and reads its answer (docs/serving.md, "Tool calls",
// "Reasoning"): the chat template's inputs (tools rendered whenever given, tool_choice "none"
// included; enable_thinking false when the reasoning budget is 0), and the options of the answer's
// parser (chat_output.h), chosen from the model's template and the rendered prompt.
#pragma once
#include <optional>
#include <string_view>

#include "server/chat_output.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace mpkv::server {

// default_budget: the server's --reasoning-budget (-1: unlimited), used when the request has none.
ChatTemplateInputs chat_template_inputs(const CompletionRequest& r, int default_budget);

// nullopt when nothing is to be split: no thinking in the template (or reasoning_format none) and
// no tool calls to read (no tools, or tool_choice none). tool_choice required / named: the answer
// is read as output of the forced-call schema (ChatOutputOptions::forced).
std::optional<ChatOutputOptions> chat_output_options(const CompletionRequest& r, std::string_view template_source,
                                                     std::string_view prompt);

// Whether a constrained chat answer's grammar starts after the end-of-thinking tag: the template
// thinks and the rendered prompt opened the block (engine/grammar_gate.h; docs/structured_outputs.md,
// "Thinking before the answer"). The reasoning format does not matter: the tokens are the same.
bool grammar_after_thinking(const CompletionRequest& r, std::string_view template_source, std::string_view prompt);

// The budget in effect: the request's, else the server's default.
int effective_reasoning_budget(const CompletionRequest& r, int default_budget);

}  // namespace mpkv::server
