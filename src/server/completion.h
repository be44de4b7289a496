// One completion request in flight between the HTTP thread that answers it and the engine: it
// submits the request, collects its output events (request_channel.h), and answers either with
// one JSON body (wait_response) or as a stream of server-sent events (next). A completion that is
// destroyed or cancelled before its final event aborts its request, so a vanished client never
// leaves pages behind.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/http_types.h"
#include "server/inflight.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/request_channel.h"

namespace mpkv::server {

class Completion : public ResponseStream {
 public:
  Completion(Backend& backend, ServerMetrics& metrics, InFlight& inflight, ResponseFormatter formatter,
             int n_prompt_tokens, bool include_usage);
  ~Completion() override;

  // Submits the request (throws QueueFull or Error from the backend).
  void start(RequestParams params);
  // Blocks until the final event; the non-streaming response.
  HttpResponse wait_response();
  // ResponseStream: chat's role chunk first, then one chunk per event with text, the finish
  // chunk, the usage chunk when asked, and data: [DONE]. An SSE comment every kKeepAlive
  // without events, so a vanished client is noticed even while its request waits.
  bool next(std::string& out, std::chrono::milliseconds wait) override;
  void cancel() override;  // any thread
  void set_wakeup(std::function<void()> wake) override { channel_->set_wakeup(std::move(wake)); }

  static constexpr std::chrono::seconds kKeepAlive{5};

 private:
  // Appends the text / logprobs of events to text_ / logprobs_ (non-streaming) or to an SSE piece.
  std::vector<LogprobEntry> logprob_entries(const RequestOutput& e) const;
  std::string stream_piece(const RequestOutput& e);

  Backend& backend_;
  InFlight& inflight_;
  ResponseFormatter fmt_;
  std::shared_ptr<RequestChannel> channel_;
  ServerMetrics& metrics_;
  int n_prompt_;
  bool include_usage_;
  bool started_stream_ = false;
  std::atomic<bool> finished_{false};  // read by cancel() on the transport's thread
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace mpkv::server
