#include "server/tool_call_stream.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;
constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>", kMistralStart = "[TOOL_CALLS]", kArgs = "[ARGS]";

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }
bool args_key(const std::string& k) { return k == "arguments" || k == "parameters"; }

// A JSON string token decoded, or nullopt (not valid: the parse at the object's close says why).
std::optional<std::string> decode_string(const std::string& raw) {
  const ojson v = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_string()) return std::nullopt;
  return v.get<std::string>();
}
}  // namespace

void apply_tool_call_deltas(std::vector<ParsedToolCall>& calls, const std::vector<ToolCallDelta>& deltas) {
  for (const ToolCallDelta& d : deltas) {
    if (d.head) {
      if (calls.size() <= d.index) calls.resize(d.index + 1);
      calls[d.index].id = d.id;
      calls[d.index].name = d.name;
    }
    if (d.index < calls.size()) calls[d.index].arguments += d.arguments;
  }
}

ToolCallStreamer::ToolCallStreamer(ToolCallFormat f, bool stream_arguments) : format_(f), stream_arguments_(stream_arguments) {
  switch (f) {
    case ToolCallFormat::hermes: start_marker(kHermesOpen, W::before_object); break;
    case ToolCallFormat::mistral:
      start_marker(kMistralStart, W::mistral_after);
      array_ids_ = true;
      break;
    default: state_ = W::before_object; break;  // Llama 3: '{', or <|python_tag|> first
  }
}

ToolCallStreamer ToolCallStreamer::forced(const ToolRequest& r) {
  ToolCallStreamer s(ToolCallFormat::none, /*stream_arguments=*/true);
  if (r.choice == ToolChoice::named) {
    s.state_ = W::forced_args;
    s.named_ = r.named;
  } else {
    s.state_ = W::forced_array;
  }
  return s;
}

void ToolCallStreamer::start_marker(std::string_view marker, W next) {
  state_ = W::marker;
  marker_ = marker;
  matched_ = 0;
  next_ = next;
}

void ToolCallStreamer::feed(std::string_view bytes, std::vector<ToolCallDelta>& out) {
  for (char c : bytes) {
    if (state_ == W::ended || state_ == W::broken) return;
    byte(c, out);
    ++pos_;
  }
}

void ToolCallStreamer::begin_call() {
  Call c;
  c.start = calls_.empty() ? 0 : end_of_last_;
  calls_.push_back(c);
  scan_ = JsonScanner();
  text_.clear();
  key_.clear();
  last_key_.clear();
  value_.clear();
  role_ = Role::other;
  seen_name_ = seen_id_ = seen_args_ = false;
  name_.clear();
  id_.clear();
  pending_args_.clear();
  final_ = ParsedToolCall();
}

void ToolCallStreamer::byte(char c, std::vector<ToolCallDelta>& out) {
  switch (state_) {
    case W::marker:
      if (c != marker_[matched_]) {
        // A marker between calls that turns out to be text ends the calls; anywhere else it breaks them.
        if (soft_) state_ = W::ended;
        else break_here();
        return;
      }
      if (++matched_ < marker_.size()) return;
      state_ = next_;
      if (marker_ == kHermesClose) complete_call(out);
      return;
    case W::before_object:
      if (space(c)) return;
      if (c == '<' && format_ == ToolCallFormat::llama3_json && pos_ == 0) {
        soft_ = false;
        start_marker(kPythonTag, W::before_object);
        matched_ = 1;
        return;
      }
      if (c != '{') return break_here();
      begin_call();
      state_ = W::object;
      in_array_ = false;
      return object_byte(c, out);
    case W::object: return object_byte(c, out);
    case W::after_object:
      if (space(c)) return;
      if (c != '<') return break_here();
      soft_ = false;
      start_marker(kHermesClose, W::between);
      matched_ = 1;
      return;
    case W::between:
      if (space(c)) return;
      soft_ = true;
      if (format_ == ToolCallFormat::hermes && c == kHermesOpen[0]) start_marker(kHermesOpen, W::before_object);
      else if (format_ == ToolCallFormat::mistral && c == kMistralStart[0]) start_marker(kMistralStart, W::mistral_after);
      else state_ = W::ended;
      if (state_ == W::marker) matched_ = 1;
      return;
    case W::llama_between:
      if (space(c)) return;
      if (c == ';' && !semicolon_seen_) {
        semicolon_seen_ = true;
        return;
      }
      if (c != '{') {
        state_ = W::ended;
        return;
      }
      begin_call();
      state_ = W::object;
      in_array_ = false;
      return object_byte(c, out);
    case W::mistral_after:
      if (space(c)) return;
      if (c == '[') {
        state_ = W::array_before;
        return;
      }
      if (!name_char(c)) return break_here();
      begin_call();
      name_ += c;
      state_ = W::mistral_name;
      return;
    case W::mistral_name:
      if (name_char(c)) {
        name_ += c;
        return;
      }
      if (c != '[') return break_here();
      soft_ = false;
      start_marker(kArgs, W::mistral_args);
      matched_ = 1;
      return;
    case W::mistral_args: {
      if (scan_.depth() == 0 && c != '{') return break_here();
      const int depth_before = scan_.depth();
      const JsonScanner::Byte kind = scan_.feed(c);
      if (kind == JsonScanner::Byte::error) return break_here();
      text_ += c;
      args_byte(c, kind, scan_.began_value() && depth_before >= 1, scan_.complete(), out);
      if (!scan_.complete()) return;
      const ojson j = ojson::parse(text_, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return break_here();
      final_ = ParsedToolCall{"", name_, minify_json(text_)};
      complete_call(out);
      state_ = W::between;
      return;
    }
    case W::forced_array:
      if (space(c)) return;
      if (c != '[') return break_here();
      state_ = W::array_before;
      return;
    case W::forced_args:
      if (space(c)) return;
      if (c != '{') return break_here();
      begin_call();
      name_ = named_;
      state_ = W::mistral_args;
      return byte(c, out);
    case W::array_before:
      if (space(c)) return;
      if (c != '{') return break_here();
      begin_call();
      state_ = W::object;
      in_array_ = true;
      return object_byte(c, out);
    case W::array_after:
      if (space(c)) return;
      if (c != ',' && c != ']') return break_here();
      complete_call(out);
      state_ = c == ',' ? W::array_before : W::between;
      return;
    case W::ended:
    case W::broken: return;
  }
}

// A byte of a call object: its depth-1 keys and the values of "name", "id" and the arguments are
// followed; the arguments object's bytes go to args_byte.
void ToolCallStreamer::object_byte(char c, std::vector<ToolCallDelta>& out) {
  const int depth_before = scan_.depth();
  const bool key_before = scan_.in_key();
  const JsonScanner::Byte kind = scan_.feed(c);
  if (kind == JsonScanner::Byte::error) return break_here();
  text_ += c;
  if (depth_before == 1 && (key_before || scan_.in_key())) {
    key_ += c;
    if (!scan_.in_key()) {  // the key's closing quote
      last_key_ = decode_string(key_).value_or("");
      key_.clear();
    }
    return;
  }
  if (depth_before == 1 && scan_.began_value()) {
    role_ = Role::other;
    if (last_key_ == "name" && !seen_name_) {
      seen_name_ = true;
      if (c == '"') role_ = Role::name;
    } else if (last_key_ == "id" && !seen_id_) {
      seen_id_ = true;
      if (c == '"') role_ = Role::id;
    } else if (args_key(last_key_) && !seen_args_) {
      seen_args_ = true;
      if (c == '{') role_ = Role::args;
    }
    value_.clear();
  }
  switch (role_) {
    case Role::name:
    case Role::id:
      value_ += c;
      if (!scan_.in_string()) {  // the value's closing quote
        const std::optional<std::string> v = decode_string(value_);
        if (v) (role_ == Role::name ? name_ : id_) = *v;
        role_ = Role::other;
      }
      break;
    case Role::args:
      args_byte(c, kind, scan_.began_value() && depth_before >= 2, scan_.depth() == 1, out);
      if (scan_.depth() == 1) role_ = Role::other;
      break;
    default: break;
  }
  if (!scan_.complete()) return;
  size_t at = 0;
  std::optional<ParsedToolCall> call = read_call_object(text_, at, {"arguments", "parameters"});
  if (!call) return break_here();
  final_ = std::move(*call);
  if (format_ == ToolCallFormat::hermes) {
    state_ = W::after_object;
  } else if (in_array_) {
    state_ = W::array_after;
  } else {  // Llama 3: the object is the call
    complete_call(out);
    state_ = W::llama_between;
    semicolon_seen_ = false;
  }
}

// A byte of the arguments object (whitespace between tokens dropped). The call's head goes out once
// its name is known and the arguments began their first value or closed.
void ToolCallStreamer::args_byte(char c, JsonScanner::Byte kind, bool value_began, bool closed, std::vector<ToolCallDelta>& out) {
  if (kind != JsonScanner::Byte::token) return;
  Call& call = calls_.back();
  if (call.committed) {
    call.sent += c;
    if (!out.empty() && out.back().index == calls_.size() - 1) out.back().arguments += c;
    else out.push_back({calls_.size() - 1, false, "", "", std::string(1, c)});
    return;
  }
  pending_args_ += c;
  // A Mistral array item's "id" follows its arguments: it goes out whole, when complete.
  if (stream_arguments_ && !(in_array_ && array_ids_) && !name_.empty() && (value_began || closed)) commit(id_, out);
}

void ToolCallStreamer::commit(const std::string& id, std::vector<ToolCallDelta>& out) {
  Call& call = calls_.back();
  call.committed = true;
  call.id = id;
  call.name = name_;
  call.sent = pending_args_;
  out.push_back({calls_.size() - 1, true, id, name_, std::move(pending_args_)});
  pending_args_.clear();
}

// The call and its wrapper are whole: a call not sent yet goes out now, whole; one being sent gets
// what the whole-call parse has beyond what was sent (nothing, when the two read the text alike).
void ToolCallStreamer::complete_call(std::vector<ToolCallDelta>& out) {
  Call& call = calls_.back();
  if (!stream_arguments_) {  // goes out at the end of the answer, if it is a call then
  } else if (!call.committed) {
    name_ = final_.name;
    pending_args_ = final_.arguments;
    commit(final_.id, out);
  } else if (final_.arguments.size() > call.sent.size() && final_.arguments.compare(0, call.sent.size(), call.sent) == 0) {
    out.push_back({calls_.size() - 1, false, "", "", final_.arguments.substr(call.sent.size())});
    call.sent = final_.arguments;
  }
  call.complete = true;
  ++n_complete_;
  end_of_last_ = pos_ + 1;
}

}  // namespace mpkv::server
