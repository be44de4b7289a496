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
        if (!streamer_) {
          // A Llama 3 call after text is a call only if it ends the answer: known at the end.
          stream_arguments_ = !(opts_.tools == ToolCallFormat::llama3_json && content_started_ && pending_[0] == '{');
          streamer_.emplace(opts_.tools, stream_arguments_);
          fed_ = 0;
        }
        std::vector<ToolCallDelta> calls;
        streamer_->feed(std::string_view(pending_).substr(fed_), calls);
        fed_ = pending_.size();
        if (opts_.stream) release_calls(calls, out);
        // A Llama 3 block at the answer's first '{' is released as content as soon as it is known
        // not to be a call object; every other block is held until finish().
        if (streamer_->committed() || opts_.tools != ToolCallFormat::llama3_json || pending_.empty() || pending_[0] != '{') return;
        if (llama3_json_start(pending_) != JsonCallStart::not_call) return;
        streamer_.reset();
        first_brace_seen_ = true;  // later braces are text
        phase_ = Phase::content;
        break;
      }
      case Phase::forced: {  // tool_choice required / named: the JSON the grammar allowed
        if (!streamer_) {
          streamer_.emplace(ToolCallStreamer::forced(*opts_.forced));
          stream_arguments_ = true;
          fed_ = 0;
        }
        std::vector<ToolCallDelta> calls;
        streamer_->feed(std::string_view(pending_).substr(fed_), calls);
        fed_ = pending_.size();
        if (opts_.stream) release_calls(calls, out);
        return;
      }
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
    case Phase::forced: {
      std::optional<ParsedBlock> block;
      try {
        block = ParsedBlock{tool_calls_from_forced_output(*opts_.forced, pending_, opts_.call_id_prefix), ""};
      } catch (const Error&) {  // not complete calls (a length stop inside the JSON)
      }
      finish_calls(std::move(block), out);
      break;
    }
    case Phase::tool_block: finish_block(out); break;
  }
  pending_.clear();
  return out;
}

std::string ChatOutputParser::call_id(size_t index, const std::string& own) const {
  return own.empty() ? opts_.call_id_prefix + std::to_string(index) : own;
}

// Streamed deltas go out with their call's id (the model's own, else one made from the index).
void ChatOutputParser::release_calls(std::vector<ToolCallDelta>& calls, ChatDelta& out) {
  for (ToolCallDelta& d : calls) {
    if (!opts_.parallel_tool_calls && d.index > 0) continue;  // only the first call is kept
    if (d.head) {
      d.id = call_id(d.index, d.id);
      n_calls_ = d.index + 1;
    }
    out.tool_calls.push_back(std::move(d));
  }
}

// The whole block parsed (the authority): each call's rest goes out (streamed) or the call whole;
// a block that is not well-formed calls is content, whole, unless calls of it were already streamed
// (those stay; the text from where it broke, or of a call not yet sent, is content).
void ChatOutputParser::finish_block(ChatDelta& out) {
  const std::vector<ToolCallStreamer::Call> no_calls;
  const std::vector<ToolCallStreamer::Call>& sent = streamer_ ? streamer_->calls() : no_calls;
  std::optional<ParsedBlock> block = parse_tool_call_block(opts_.tools, pending_);
  if (block && !ends_answer_if_after_text(*block)) block.reset();
  if (!block && !opts_.parallel_tool_calls && call_complete()) {
    // The generation stopped after the first call (parallel_tool_calls false): what came after it
    // (the rest of the last token's text, or a wrapper Mistral's array closes later) is not read.
    const ToolCallStreamer::Call& first = sent.front();
    block = ParsedBlock{{ParsedToolCall{first.id, first.name, first.sent}}, ""};
  }
  finish_calls(std::move(block), out);
}

// The calls the whole output parse found (nullopt: it is not well-formed calls) against what the
// streamer sent of them.
void ChatOutputParser::finish_calls(std::optional<ParsedBlock> block, ChatDelta& out) {
  const std::vector<ToolCallStreamer::Call> no_calls;
  const std::vector<ToolCallStreamer::Call>& sent = streamer_ ? streamer_->calls() : no_calls;
  if (!block) {
    if (!opts_.stream || !streamer_ || !streamer_->committed()) {
      release_content(pending_, out);
      return;
    }
    size_t from = streamer_->broken_at() != std::string_view::npos ? streamer_->broken_at() : pending_.size();
    for (const ToolCallStreamer::Call& c : sent)
      if (!c.committed) {
        from = c.start;
        break;
      }
    release_content(std::string_view(pending_).substr(std::min(from, pending_.size())), out);
    return;
  }
  if (!opts_.parallel_tool_calls) block->calls.resize(1);
  for (size_t i = 0; i < block->calls.size(); ++i) {
    ParsedToolCall& c = block->calls[i];
    const bool committed = i < sent.size() && sent[i].committed;
    if (committed && opts_.stream) {  // the head and sent.arguments went out
      if (c.arguments.size() > sent[i].sent.size() && c.arguments.compare(0, sent[i].sent.size(), sent[i].sent) == 0)
        out.tool_calls.push_back({i, false, "", "", c.arguments.substr(sent[i].sent.size())});
      continue;
    }
    // The id the head had or would have had streamed: the model's own only when read before it.
    const std::string id = call_id(i, committed ? sent[i].id : c.id);
    out.tool_calls.push_back({i, true, id, std::move(c.name), std::move(c.arguments)});
    n_calls_ = i + 1;
  }
  release_content(block->trailing, out);
}

}  // namespace mpkv::server
