#include "server/completion.h"

namespace mpkv::server {

// parallel_tool_calls false in auto mode (docs/serving.md, "Tool calls"): a second parser follows the
// output on the stepping thread, and once the first call is complete the request is aborted, which
// ends it at the engine's next step, before another token, as a stop string would; its final event
// is reported as a stop. The channel's parser sees the same text, so it has the same complete call.
class FirstCallStop {
 public:
  static std::shared_ptr<FirstCallStop> make(const std::optional<ChatOutputOptions>& o, Backend& backend) {
    if (!o || o->parallel_tool_calls || o->tools == ToolCallFormat::none || o->forced) return nullptr;
    ChatOutputOptions watch = *o;
    watch.stream = false;
    return std::make_shared<FirstCallStop>(std::move(watch), backend);
  }
  FirstCallStop(ChatOutputOptions o, Backend& backend) : parser_(std::move(o)), backend_(backend) {}
  // The event as the completion is to see it (the stepping thread, one request's events in order).
  const RequestOutput& see(const RequestOutput& out) {
    if (stopped_) {
      if (out.finished && out.reason == FinishReason::abort) {
        final_ = out;
        final_.reason = FinishReason::stop;
        return final_;
      }
      return out;
    }
    parser_.push(out.text_delta);
    if (!out.finished && parser_.call_complete()) {
      stopped_ = true;
      backend_.abort(out.id);
    }
    return out;
  }

 private:
  ChatOutputParser parser_;
  Backend& backend_;
  bool stopped_ = false;
  RequestOutput final_;
};

namespace {
ApiError shutting_down() { return ApiError(503, "the server is shutting down; the request was aborted", "", "", "server_error"); }
}  // namespace

Completion::Completion(Backend& backend, ServerMetrics& metrics, InFlight& inflight, ResponseFormatter formatter,
                       bool include_usage)
    : backend_(backend),
      inflight_(inflight),
      fmt_(std::move(formatter)),
      channel_(std::make_shared<RequestChannel>()),
      metrics_(metrics),
      include_usage_(include_usage),
      last_write_(std::chrono::steady_clock::now()) {
  inflight_.add(channel_.get());
}

Completion::~Completion() {
  channel_->set_wakeup(nullptr);  // the transport's wake may reference a connection being destroyed
  cancel();
  inflight_.remove(channel_.get());
}

void Completion::start(std::vector<ChoiceRequest> requests) {
  choices_.reserve(requests.size());
  for (ChoiceRequest& r : requests) {
    Choice& c = choices_.emplace_back();
    c.n_prompt = r.counts_prompt ? static_cast<int>(r.params.prompt.size()) : 0;
    c.result.text = std::move(r.echo);
    if (r.params.prompt_logprobs >= 0) c.first_prompt_token = r.params.prompt.front();
    if (r.chat_output) c.parser.emplace(*r.chat_output);
    c.include_reasoning = r.include_reasoning;
    // The callback may outlive this object (an aborted request's final event comes at the next
    // step), so it holds the channel and the timing by shared_ptr; metrics outlive the engine loop.
    auto timing = std::make_shared<RequestTiming>();
    ServerMetrics* metrics = &metrics_;
    std::shared_ptr<RequestChannel> ch = channel_;
    std::shared_ptr<FirstCallStop> first_call = FirstCallStop::make(r.chat_output, backend_);
    try {
      c.id = backend_.add_request(std::move(r.params), [ch, timing, metrics, first_call](const RequestOutput& out) {
        if (first_call) {
          const RequestOutput& seen = first_call->see(out);
          metrics->on_output(*timing, seen);
          ch->push(seen);
          return;
        }
        metrics->on_output(*timing, out);
        ch->push(out);
      });
    } catch (...) {
      choices_.pop_back();  // never submitted
      throw;
    }
    channel_->add_id(c.id);
    if (inflight_.aborting()) backend_.abort(c.id);  // shutdown began while it was being submitted
  }
}

// Any thread (the transport calls it when a non-streaming client leaves while the answer is being
// waited for): the ids come from the channel, under its lock; aborting a finished request is a no-op.
void Completion::cancel() {
  for (uint64_t id : channel_->ids()) backend_.abort(id);
}

void Completion::append_entries(const std::vector<TokenLogprobs>& lps, std::vector<LogprobEntry>& out) const {
  for (const TokenLogprobs& t : lps) {
    LogprobEntry le{backend_.token_text(t.sampled.token), t.sampled.logprob, {}};
    for (const TokenLogprob& alt : t.top) le.top.emplace_back(backend_.token_text(alt.token), alt.logprob);
    out.push_back(std::move(le));
  }
}

Completion::Choice& Completion::choice_of(uint64_t id) {
  for (Choice& c : choices_)
    if (c.id == id) return c;
  throw InternalError("Completion: an event for request " + std::to_string(id) + ", which is not one of its choices");
}

int Completion::apply(const RequestOutput& e, bool collect, std::vector<LogprobEntry>& entries, ChatDelta& delta) {
  Choice& c = choice_of(e.id);
  MPKV_ASSERT(!c.finished, "Completion: an event after a request's final event");
  entries.clear();
  delta = ChatDelta{};
  if (c.parser) {
    delta = c.parser->push(e.text_delta);
    if (e.finished) {
      ChatDelta end = c.parser->finish();
      delta.reasoning += end.reasoning;
      delta.content += end.content;
      delta.tool_calls.insert(delta.tool_calls.end(), end.tool_calls.begin(), end.tool_calls.end());
    }
    if (!c.include_reasoning) delta.reasoning.clear();
  }
  if (c.first_prompt_token >= 0 && !e.tokens.empty()) {  // the first generated token's event
    entries.push_back({backend_.token_text(c.first_prompt_token), std::nullopt, {}});
    append_entries(e.prompt_logprobs, entries);
    c.first_prompt_token = -1;
  }
  append_entries(e.logprobs, entries);
  if (collect) {
    c.result.text += c.parser ? delta.content : e.text_delta;
    c.result.reasoning += delta.reasoning;
    apply_tool_call_deltas(c.result.tool_calls, delta.tool_calls);
    c.result.logprobs.insert(c.result.logprobs.end(), entries.begin(), entries.end());
  }
  if (e.finished) {
    c.finished = true;
    c.result.reason = e.reason;
    c.n_generated = e.stats.n_generated;
    if (c.n_prompt > 0) c.n_cached = e.stats.n_cached_prompt_tokens;  // the prompt's counting choice
    ++n_finished_;
    if (e.reason == FinishReason::abort) aborted_ = true;
  }
  return static_cast<int>(&c - choices_.data());
}

Usage Completion::usage() const {
  Usage u;
  for (const Choice& c : choices_) {
    u.prompt_tokens += c.n_prompt;
    u.completion_tokens += c.n_generated;
    u.cached_tokens += c.n_cached;
  }
  return u;
}

HttpResponse Completion::wait_response() {
  std::vector<RequestOutput> events;
  while (!all_finished()) {
    events.clear();
    channel_->pop(events, std::chrono::milliseconds(1000));
    std::vector<LogprobEntry> entries;
    ChatDelta delta;
    for (const RequestOutput& e : events) apply(e, /*collect=*/true, entries, delta);
  }
  HttpResponse r;
  if (aborted_) {
    const ApiError err = shutting_down();
    r.status = err.status();
    r.body = error_body(err);
    return r;
  }
  std::vector<ChoiceResult> results;
  for (Choice& c : choices_) results.push_back(std::move(c.result));
  r.body = fmt_.full(results, usage());
  return r;
}

// With echo and logprobs the echoed prompt goes out with the first generated token, beside its
// logprobs (next() holds it back).
std::string Completion::stream_piece(const RequestOutput& e) {
  const bool with_echo = choice_of(e.id).first_prompt_token >= 0 && !e.tokens.empty();
  std::vector<LogprobEntry> entries;
  ChatDelta delta;
  const int index = apply(e, /*collect=*/false, entries, delta);
  std::string piece;
  if (choices_[index].parser) {  // a split chat answer: content / thinking deltas, then the calls
    if (!delta.content.empty() || !delta.reasoning.empty() || !entries.empty()) piece += fmt_.chat_delta(index, delta, entries);
    piece += fmt_.tool_call_deltas(index, delta.tool_calls);
  } else {
    const std::string text = with_echo ? choices_[index].result.text + e.text_delta : e.text_delta;
    if (!text.empty() || !entries.empty()) piece += fmt_.delta(index, text, entries);
  }
  if (e.finished && e.reason != FinishReason::abort)
    piece += fmt_.last(index, e.reason, choices_[index].parser && choices_[index].parser->has_tool_calls());
  return piece;
}

bool Completion::next(std::string& out, std::chrono::milliseconds wait) {
  out.clear();
  if (!started_stream_) {
    started_stream_ = true;
    out = fmt_.first();
    for (size_t i = 0; i < choices_.size(); ++i)
      if (!choices_[i].result.text.empty() && choices_[i].first_prompt_token < 0)
        out += fmt_.delta(static_cast<int>(i), choices_[i].result.text, {});
    if (!out.empty()) return true;
  }
  if (ended_stream_) return false;
  std::vector<RequestOutput> events;
  const auto now = std::chrono::steady_clock::now();
  if (!channel_->pop(events, wait)) {
    if (now - last_write_ >= kKeepAlive) {
      out = ": keep-alive\n\n";
      last_write_ = now;
    }
    return true;
  }
  for (const RequestOutput& e : events) out += stream_piece(e);
  last_write_ = now;
  if (!all_finished()) return true;
  ended_stream_ = true;
  if (aborted_) {
    out += ResponseFormatter::error_event(shutting_down());
    return false;
  }
  if (include_usage_) out += fmt_.usage(usage());
  out += ResponseFormatter::done();
  return false;
}

}  // namespace mpkv::server
