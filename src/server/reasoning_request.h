// The reasoning fields of a chat request (docs/serving.md, "Reasoning"), in the peers' spellings:
//   reasoning_format         llama-server's: "none" leaves <think> ... </think> in the content;
//                            "auto" / "deepseek" (the default) put it in reasoning_content;
//   include_reasoning        vLLM's: false drops the thinking from the answer (it is still generated);
//   reasoning_budget_tokens  llama-server's per-request budget (alias thinking_budget_tokens):
//                            -1 unlimited, 0 no thinking, N > 0 at most N tokens of thinking, then
//                            the end tag is forced (the server's --reasoning-budget is the default).
// Every malformed value is an ApiError(400) naming the field.
#pragma once
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace mpkv::server {

enum class ReasoningFormat : uint8_t { none, deepseek };

inline constexpr int kMaxReasoningBudget = 1 << 24;

struct ReasoningRequest {
  ReasoningFormat format = ReasoningFormat::deepseek;
  bool include_reasoning = true;
  std::optional<int> budget_tokens;  // absent: the server's default; -1: unlimited
};

ReasoningRequest parse_reasoning_request(const nlohmann::ordered_json& body);

}  // namespace mpkv::server
