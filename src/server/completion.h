// One completion request in flight between the HTTP thread that answers it and the engine: it
// submits one engine request per choice (n per prompt; several /v1/completions prompts),
// collects their output events in one channel (request_channel.h), and answers either with one
// JSON body (wait_response) or as a stream of server-sent events (next). A completion that is
// destroyed or cancelled before its final events aborts its requests, so a vanished client never
// leaves pages behind.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/http_types.h"
#include "server/inflight.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/request_channel.h"

namespace mpkv::server {

// One choice's engine request and the text its answer starts with (the prompt, for echo).
// counts_prompt: usage counts its prompt tokens (only the first of a prompt's n choices, as
// OpenAI counts a prompt once however many choices it has).
// chat_output: a chat answer split into thinking, content and tool calls (chat_output.h); absent:
// the text as generated. include_reasoning false: the thinking is left out of the answer.
struct ChoiceRequest {
  RequestParams params;
  std::string echo;
  bool counts_prompt = true;
  std::optional<ChatOutputOptions> chat_output;
  bool include_reasoning = true;
};

class Completion : public ResponseStream {
 public:
  Completion(Backend& backend, ServerMetrics& metrics, InFlight& inflight, ResponseFormatter formatter,
             bool include_usage);
  ~Completion() override;

  // Submits the requests in order (throws QueueFull or Error from the backend; the ones already
  // submitted are aborted when this object goes).
  void start(std::vector<ChoiceRequest> requests);
  // Blocks until every choice's final event; the non-streaming response.
  HttpResponse wait_response();
  // ResponseStream: chat's role chunk and the echoed prompts first, then one chunk per event with
  // text, each choice's finish chunk, the usage chunk when asked, and data: [DONE]. An SSE comment
  // every kKeepAlive without events, so a vanished client is noticed even while its request waits.
  bool next(std::string& out, std::chrono::milliseconds wait) override;
  void cancel() override;  // any thread
  void set_wakeup(std::function<void()> wake) override { channel_->set_wakeup(std::move(wake)); }

  static constexpr std::chrono::seconds kKeepAlive{5};

 private:
  struct Choice {
    uint64_t id = 0;  // the engine's request id
    // n_prompt, n_cached (prompt tokens read from the prefix cache): 0 when another choice of its
    // prompt counts them.
    int n_prompt = 0, n_generated = 0, n_cached = 0;
    ChoiceResult result;  // echo + text so far; logprobs (non-streaming); reason once finished
    bool finished = false;
    // Echo with logprobs: the prompt's first token (its entry has no logprob) until the event of
    // the first generated token brings the prompt's logprobs; a stream sends the echo then.
    int32_t first_prompt_token = -1;
    std::optional<ChatOutputParser> parser;  // ChoiceRequest::chat_output
    bool include_reasoning = true;
  };
  void append_entries(const std::vector<TokenLogprobs>& lps, std::vector<LogprobEntry>& out) const;
  Choice& choice_of(uint64_t id);
  // Applies one event to its choice (appending text and logprobs when `collect`); returns the
  // choice's index, sets `entries` to the event's logprob entries (the echoed prompt's first) and
  // `delta` to what the choice's parser released (with a parser only).
  int apply(const RequestOutput& e, bool collect, std::vector<LogprobEntry>& entries, ChatDelta& delta);
  std::string stream_piece(const RequestOutput& e);
  bool all_finished() const { return n_finished_ == choices_.size(); }
  Usage usage() const;

  Backend& backend_;
  InFlight& inflight_;
  ResponseFormatter fmt_;
  std::shared_ptr<RequestChannel> channel_;
  ServerMetrics& metrics_;
  bool include_usage_;
  std::vector<Choice> choices_;
  size_t n_finished_ = 0;
  bool aborted_ = false;  // a choice ended with FinishReason::abort (shutdown): the answer is an error
  bool started_stream_ = false, ended_stream_ = false;
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace mpkv::server
