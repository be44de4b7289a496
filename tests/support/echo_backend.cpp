#include "support/echo_backend.h"

#include <algorithm>
#include <vector>

namespace mpkv::server {

std::vector<int32_t> EchoBackend::encode_prompt(const std::string& text, bool /*add_special*/) const {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

Backend::ChatPrompt EchoBackend::chat_prompt(const ChatTemplateInputs& in) const {
  std::string text;
  for (const ChatMessage& m : in.messages) {
    text += m.role + ": " + m.content;
    for (const ChatToolCall& c : m.tool_calls) text += " [call " + c.name + "(" + c.arguments + ")]";
    if (!m.tool_call_id.empty()) text += " [for " + m.tool_call_id + "]";
    text += "\n";
  }
  for (const ChatTool& t : in.tools) text += "tool=" + t.name + "\n";
  for (const auto& [name, value] : in.kwargs) text += name + "=" + value + "\n";
  text += "assistant: ";
  return {text, encode_prompt(text)};
}

std::string EchoBackend::token_text(int32_t id) const {
  return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
}

std::string EchoBackend::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) text += token_text(id);
  return text;
}

uint64_t EchoBackend::add_request(RequestParams params, OutputCallback on_output) {
  MPKV_CHECK(!params.prompt.empty(), "empty prompt");
  MPKV_CHECK(static_cast<int>(params.prompt.size()) < n_ctx_, "prompt does not fit the context");
  MPKV_CHECK(params.max_tokens == -1 || params.max_tokens >= 1, "max_tokens must be -1 or >= 1");
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    if (static_cast<int>(held_.size()) >= max_queue_) throw QueueFull("the queue is full");
    id = next_id_++;
    prompt_total_ += params.prompt.size();
    Held& h = held_[id];
    h.params = std::move(params);
    h.callback = std::move(on_output);
  }
  if (immediate_)
    while (step()) {
    }
  return id;
}

void EchoBackend::abort(uint64_t id) {
  std::lock_guard lock(mu_);
  if (auto it = held_.find(id); it != held_.end()) it->second.aborted = true;
}

RequestOutput EchoBackend::advance(uint64_t id, Held& h) const {
  RequestOutput out;
  out.id = id;
  const std::vector<int32_t>& p = h.params.prompt;
  const int limit = h.params.max_tokens < 0 ? static_cast<int>(p.size()) : h.params.max_tokens;
  if (h.aborted) {
    out.finished = true;
    out.reason = FinishReason::abort;
  } else {
    const int32_t tok = p[h.generated % p.size()];
    out.tokens.push_back(tok);
    if (h.generated == 0 && h.params.prompt_logprobs >= 0)  // prompt tokens 1.. at -0.25 (alternatives as below)
      for (size_t k = 1; k < p.size(); ++k) {
        TokenLogprobs lp{{p[k], -0.25f}, {}};
        for (int a = 0; a < h.params.prompt_logprobs; ++a) lp.top.push_back({(p[k] + a) % 256, -0.25f - a});
        out.prompt_logprobs.push_back(lp);
      }
    if (h.params.top_logprobs >= 0) {
      TokenLogprobs lp{{tok, -0.5f}, {}};
      for (int k = 0; k < h.params.top_logprobs; ++k) lp.top.push_back({(tok + k) % 256, -0.5f - k});
      out.logprobs.push_back(lp);
    }
    ++h.generated;
    const auto& st = h.params.stop_token_ids;
    if (tok == kEchoEnd || std::find(st.begin(), st.end(), tok) != st.end()) {
      out.finished = true;
      out.reason = FinishReason::stop;
      out.stats.n_prompt_tokens = static_cast<int>(p.size());
      out.stats.n_generated = h.generated;
      return out;
    }
    h.text += token_text(tok);
    out.text_delta = token_text(tok);
    for (const std::string& s : h.params.stop) {
      if (const size_t at = h.text.find(s); at != std::string::npos) {
        // Drop the stop string (and anything after it) from what this event shows.
        const size_t shown = h.text.size() - out.text_delta.size();
        out.text_delta = at > shown ? h.text.substr(shown, at - shown) : "";
        out.finished = true;
        out.reason = FinishReason::stop;
      }
    }
    if (!out.finished && h.generated >= limit) out.finished = true, out.reason = FinishReason::length;
    if (!out.finished && static_cast<int>(p.size()) + h.generated >= n_ctx_)
      out.finished = true, out.reason = FinishReason::context;
  }
  out.stats.n_prompt_tokens = static_cast<int>(p.size());
  out.stats.n_generated = h.generated;
  return out;
}

bool EchoBackend::step() {
  std::vector<std::pair<OutputCallback, RequestOutput>> events;
  {
    std::lock_guard lock(mu_);
    if (held_.empty()) return false;
    for (auto it = held_.begin(); it != held_.end();) {
      RequestOutput out = advance(it->first, it->second);
      generated_total_ += out.tokens.size();
      events.emplace_back(it->second.callback, std::move(out));
      it = events.back().second.finished ? held_.erase(it) : std::next(it);
    }
  }
  for (auto& [cb, out] : events) cb(out);
  return true;
}

EngineMetrics EchoBackend::metrics() const {
  std::lock_guard lock(mu_);
  EngineMetrics m;
  m.running = static_cast<int>(held_.size());
  for (const auto& [id, h] : held_) {
    m.kv_tokens += h.params.prompt.size() + h.generated;
    m.kv_bytes_used += 2 * (h.params.prompt.size() + h.generated);
  }
  m.kv_budget_bytes = 2 * static_cast<size_t>(n_ctx_) * max_queue_;
  m.prompt_tokens_total = prompt_total_;
  m.generation_tokens_total = generated_total_;
  return m;
}

}  // namespace mpkv::server
