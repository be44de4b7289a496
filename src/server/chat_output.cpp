#include "server/chat_output.h"

#include "server/json_scan.h"
#include "server/tool_schema.h"
#include "util/error.h"

namespace mpkv::server {

ChatOutputParser::ChatOutputParser(ChatOutputOptions opts)
    : opts_(std::move(opts)),
      phase_(opts_.thinking && opts_.starts_in_thinking ? Phase::thinking : opts_.forced ? Phase::forced : Phase::start) {}

ChatDelta ChatOutputParser::push(std::string_view text) {
  pending_.append(text);
  ChatDelta out;
  step(out);
  return out;
}

// The whitespace after the thinking tags is the block's layout, not text (Qwen3's template writes
// "<think>\n" + reasoning + "\n</think>\n\n"): the thinking begins at its first non-space, as the
// content after </think> does (docs/serving.md, "Reasoning").
void ChatOutputParser::release_reasoning(std::string_view text, ChatDelta& out) {
  if (!reasoning_started_) {
    const size_t first = skip_json_space(text, 0);
    if (first == text.size()) return;
    text.remove_prefix(first);
    reasoning_started_ = true;
  }
  out.reasoning.append(text);
}

void ChatOutputParser::release_content(std::string_view text, ChatDelta& out) {
  if (!content_started_) {  // content begins at its first non-space (whitespace after </think> dropped)
    const size_t first = skip_json_space(text, 0);
    if (first == text.size()) return;
    text.remove_prefix(first);
    content_started_ = true;
  }
  out.content.append(text);
}

void ChatOutputParser::step(ChatDelta& out) {
  for (;;) {
    switch (phase_) {
      case Phase::start: {
        if (!opts_.thinking) { phase_ = Phase::content; break; }
        const size_t first = skip_json_space(pending_, 0);
        const std::string_view rest = std::string_view(pending_).substr(first);
        if (rest.size() < kThinkStart.size() && kThinkStart.substr(0, rest.size()) == rest) return;  // may become <think>
        if (rest.substr(0, kThinkStart.size()) == kThinkStart) {
          pending_.erase(0, first + kThinkStart.size());
          phase_ = Phase::thinking;
        } else {
          phase_ = Phase::content;
        }
        break;
      }
      case Phase::thinking: {
        const size_t end = pending_.find(kThinkEnd);
        if (end == std::string::npos) {
          const size_t keep = partial_marker_suffix(pending_, kThinkEnd);
          release_reasoning(std::string_view(pending_).substr(0, pending_.size() - keep), out);
          pending_.erase(0, pending_.size() - keep);
          return;
        }
        release_reasoning(std::string_view(pending_).substr(0, end), out);
        pending_.erase(0, end + kThinkEnd.size());
        phase_ = opts_.forced ? Phase::forced : Phase::content;
        break;
      }
      case Phase::content: {
        const MarkupScan m = scan_tool_call_start(opts_.tools, pending_, !first_brace_seen_);
        if (m.start == std::string_view::npos) {
          release_content(std::string_view(pending_).substr(0, pending_.size() - m.hold), out);
          pending_.erase(0, pending_.size() - m.hold);
          return;
        }
        release_content(std::string_view(pending_).substr(0, m.start), out);
        pending_.erase(0, m.start);
        phase_ = Phase::tool_block;
        break;
      }
      case Phase::tool_block: {
        // A Llama 3 block at the answer's first '{' is released as content as soon as it is known
        // not to be a call object; every other block is held whole until finish().
        if (opts_.tools != ToolCallFormat::llama3_json || pending_.empty() || pending_[0] != '{') return;
        if (llama3_json_start(pending_) != JsonCallStart::not_call) return;
        first_brace_seen_ = true;  // later braces are text
        phase_ = Phase::content;
        break;
      }
      case Phase::forced: return;  // parsed whole, by finish()
    }
  }
}

// A bare Llama 3 JSON call after text must end the answer, as llama.cpp reads these answers (text,
// the calls, the end): "Sure: {call}" is a call, "{call} is the shape to use" in the middle of an
// answer is not. A call that is the answer, or follows <|python_tag|>, may have text after it.
bool ChatOutputParser::ends_answer_if_after_text(const ParsedBlock& block) const {
  if (opts_.tools != ToolCallFormat::llama3_json || !content_started_ || pending_[0] != '{') return true;
  return skip_json_space(block.trailing, 0) == block.trailing.size();
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta out;
  step(out);
  switch (phase_) {
    case Phase::start:
    case Phase::content: release_content(pending_, out); break;
    case Phase::thinking: release_reasoning(pending_, out); break;  // thinking the answer never closed
    case Phase::forced:
      try {
        out.tool_calls = tool_calls_from_forced_output(*opts_.forced, pending_, opts_.call_id_prefix);
        n_calls_ = out.tool_calls.size();
      } catch (const Error&) {
        release_content(pending_, out);  // not complete calls (a length stop inside the JSON)
      }
      break;
    case Phase::tool_block: {
      std::optional<ParsedBlock> block = parse_tool_call_block(opts_.tools, pending_);
      if (!block || !ends_answer_if_after_text(*block)) {
        release_content(pending_, out);
        break;
      }
      if (!opts_.parallel_tool_calls) block->calls.resize(1);
      for (ParsedToolCall& c : block->calls) {
        if (c.id.empty()) c.id = opts_.call_id_prefix + std::to_string(n_calls_);
        ++n_calls_;
        out.tool_calls.push_back(std::move(c));
      }
      release_content(block->trailing, out);
      break;
    }
  }
  pending_.clear();
  return out;
}

}  // namespace mpkv::server
