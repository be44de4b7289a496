#include "server/reasoning_request.h"

#include "server/api_error.h"
#include "server/request_fields.h"

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;
using request_fields::field;
}  // namespace

ReasoningRequest parse_reasoning_request(const ojson& body) {
  ReasoningRequest r;
  if (const ojson* f = field(body, "reasoning_format")) {
    const std::string s = f->is_string() ? f->get<std::string>() : "";
    if (s == "none") r.format = ReasoningFormat::none;
    else if (s == "auto" || s == "deepseek") r.format = ReasoningFormat::deepseek;
    else throw ApiError(400, "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"", "reasoning_format");
  }
  if (const ojson* f = field(body, "include_reasoning")) {
    if (!f->is_boolean()) throw ApiError(400, "'include_reasoning' must be a boolean", "include_reasoning");
    r.include_reasoning = f->get<bool>();
  }
  for (const char* name : {"reasoning_budget_tokens", "thinking_budget_tokens"}) {
    const ojson* f = field(body, name);
    if (!f) continue;
    if (!f->is_number_integer() || f->get<int64_t>() < -1 || f->get<int64_t>() > kMaxReasoningBudget)
      throw ApiError(400, std::string("'") + name + "' must be an integer in [-1, " + std::to_string(kMaxReasoningBudget) + "]", name);
    if (r.budget_tokens && *r.budget_tokens != f->get<int>())
      throw ApiError(400, "'reasoning_budget_tokens' and 'thinking_budget_tokens' differ", name);
    r.budget_tokens = f->get<int>();
  }
  return r;
}

}  // namespace mpkv::server
