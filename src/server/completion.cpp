#include "server/completion.h"

namespace mpkv::server {

namespace {
ApiError shutting_down() { return ApiError(503, "the server is shutting down; the request was aborted", "", "", "server_error"); }
}  // namespace

Completion::Completion(Backend& backend, ServerMetrics& metrics, InFlight& inflight, ResponseFormatter formatter,
                       int n_prompt_tokens, bool include_usage)
    : backend_(backend),
      inflight_(inflight),
      fmt_(std::move(formatter)),
      channel_(std::make_shared<RequestChannel>()),
      metrics_(metrics),
      n_prompt_(n_prompt_tokens),
      include_usage_(include_usage),
      last_write_(std::chrono::steady_clock::now()) {
  inflight_.add(channel_.get());
}

Completion::~Completion() {
  channel_->set_wakeup(nullptr);  // the transport's wake may reference a connection being destroyed
  cancel();
  inflight_.remove(channel_.get());
}

void Completion::start(RequestParams params) {
  // The callback may outlive this object (an aborted request's final event comes at the next
  // step), so it holds the channel and the timing by shared_ptr; metrics outlive the engine loop.
  auto timing = std::make_shared<RequestTiming>();
  ServerMetrics* metrics = &metrics_;
  std::shared_ptr<RequestChannel> ch = channel_;
  const uint64_t id = backend_.add_request(std::move(params), [ch, timing, metrics](const RequestOutput& out) {
    metrics->on_output(*timing, out);
    ch->push(out);
  });
  channel_->set_id(id);
  if (inflight_.aborting()) backend_.abort(id);  // shutdown began while it was being submitted
}

void Completion::cancel() {
  if (!finished_ && channel_->id() != 0) backend_.abort(channel_->id());
}

std::vector<LogprobEntry> Completion::logprob_entries(const RequestOutput& e) const {
  std::vector<LogprobEntry> v;
  for (const TokenLogprobs& t : e.logprobs) {
    LogprobEntry le{backend_.token_text(t.sampled.token), t.sampled.logprob, {}};
    for (const TokenLogprob& alt : t.top) le.top.emplace_back(backend_.token_text(alt.token), alt.logprob);
    v.push_back(std::move(le));
  }
  return v;
}

HttpResponse Completion::wait_response() {
  std::string text;
  std::vector<LogprobEntry> logprobs;
  std::vector<RequestOutput> events;
  while (!finished_) {
    events.clear();
    channel_->pop(events, std::chrono::milliseconds(1000));
    for (const RequestOutput& e : events) {
      text += e.text_delta;
      for (LogprobEntry& le : logprob_entries(e)) logprobs.push_back(std::move(le));
      if (!e.finished) continue;
      finished_ = true;
      HttpResponse r;
      if (e.reason == FinishReason::abort) {
        const ApiError err = shutting_down();
        r.status = err.status();
        r.body = error_body(err);
      } else {
        r.body = fmt_.full(text, logprobs, e.reason, {n_prompt_, e.stats.n_generated});
      }
      return r;
    }
  }
  throw InternalError("Completion::wait_response: finished without a final event");
}

std::string Completion::stream_piece(const RequestOutput& e) {
  std::string piece;
  if (!e.text_delta.empty() || !e.logprobs.empty()) piece += fmt_.delta(e.text_delta, logprob_entries(e));
  if (!e.finished) return piece;
  finished_ = true;
  if (e.reason == FinishReason::abort) return piece + ResponseFormatter::error_event(shutting_down());
  piece += fmt_.last(e.reason);
  if (include_usage_) piece += fmt_.usage({n_prompt_, e.stats.n_generated});
  return piece + ResponseFormatter::done();
}

bool Completion::next(std::string& out, std::chrono::milliseconds wait) {
  out.clear();
  if (!started_stream_) {
    started_stream_ = true;
    out = fmt_.first();
    if (!out.empty()) return true;
  }
  if (finished_) return false;
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
  return !finished_;
}

}  // namespace mpkv::server
