// A Backend without a model, for unit tests and the fuzzer: one token per byte (id = byte value;
// kEchoEnd ends generation; no BOS, so add_special changes nothing). A request "generates" its
// prompt's bytes again, one per step(), cycling, until max_tokens (-1: the prompt's length), the
// context, a stop string or a stop token id (its text not shown); logprobs (and the prompt's) are
// fixed numbers. It
// keeps the engine's contract (one final event, abort at the next step) and counts 2 "KV bytes"
// per held token so tests can see pages freed. Thread-safe.
#pragma once
#include <map>
#include <mutex>

#include "server/backend.h"

namespace mpkv::server {

inline constexpr int32_t kEchoEnd = 256;

class EchoBackend : public Backend {
 public:
  // max_queue: requests held at once before add_request throws QueueFull. immediate: add_request
  // runs the request to its end before returning (the fuzzer has no stepping thread).
  EchoBackend(int n_ctx, int max_queue, bool immediate = false)
      : n_ctx_(n_ctx), max_queue_(max_queue), immediate_(immediate) {}

  // "role: content\n" per message (an assistant's tool calls as " [call name(arguments)]", a tool
  // message's id as " [for id]"), then "tool=name\n" per tool, "name=value\n" per
  // chat_template_kwargs entry, then "assistant: ". No template (chat_template_source() is "").
  ChatPrompt chat_prompt(const ChatTemplateInputs& inputs) const override;
  std::string chat_template_source() const override { return ""; }
  std::vector<int32_t> encode_special(const std::string& text) const override { return encode_prompt(text); }
  std::vector<int32_t> encode_prompt(const std::string& text, bool add_special = true) const override;
  std::string token_text(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int n_ctx() const override { return n_ctx_; }
  int n_vocab() const override { return kEchoEnd + 1; }
  uint64_t add_request(RequestParams params, OutputCallback on_output) override;
  void abort(uint64_t id) override;
  EngineMetrics metrics() const override;

  // One token for every held request (callbacks run on the caller's thread, outside the lock).
  // Returns false when nothing was held.
  bool step();

 private:
  struct Held {
    RequestParams params;
    OutputCallback callback;
    std::string text;  // generated so far
    int generated = 0;
    bool aborted = false;
  };
  // The next event of one request (finished when it ends).
  RequestOutput advance(uint64_t id, Held& h) const;

  int n_ctx_, max_queue_;
  bool immediate_;
  mutable std::mutex mu_;
  std::map<uint64_t, Held> held_;
  uint64_t next_id_ = 1;
  uint64_t generated_total_ = 0, prompt_total_ = 0;
};

}  // namespace mpkv::server
