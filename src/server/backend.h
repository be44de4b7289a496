// What the HTTP layer needs from a model: tokenization and the engine's request interface. The
// real one is EngineBackend (an Engine and its Tokenizer); EchoBackend (tests/support/echo_backend.h)
// stands in for a model in unit tests and the fuzzer, so the handler is tested without loading weights.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "grammar/compiled_constraint.h"
#include "grammar/constraint.h"
#include "grammar/constraint_error.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/chat_template.h"

namespace mpkv::server {

class Backend {
 public:
  virtual ~Backend() = default;
  // The prompt of a chat request: the chat template rendered with the messages, tools and kwargs
  // (chat_template_kwargs, name -> JSON text) and a generation prompt, as text (what the output
  // parsers look at: whether it opened a <think> block) and tokens. Throws Error when the template
  // refuses the inputs.
  struct ChatPrompt {
    std::string text;
    std::vector<int32_t> tokens;
  };
  virtual ChatPrompt chat_prompt(const ChatTemplateInputs& inputs) const = 0;
  // The chat prompt's tokens without tools (/tokenize).
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages,
                                   const std::vector<std::pair<std::string, std::string>>& kwargs) const {
    ChatTemplateInputs in;
    in.messages = messages;
    in.kwargs = kwargs;
    return chat_prompt(in).tokens;
  }
  // The model's tokenizer.chat_template ("" without one): how it writes tool calls and thinking
  // (tool_call_format.h).
  virtual std::string chat_template_source() const = 0;
  // Text with special-token text parsed as the tokens (a thinking tag, for the reasoning budget).
  virtual std::vector<int32_t> encode_special(const std::string& text) const = 0;
  // The raw completion prompt.
  // add_special: the model's BOS (when it uses one), as /v1/completions does; /tokenize may omit it.
  virtual std::vector<int32_t> encode_prompt(const std::string& text, bool add_special = true) const = 0;
  // The bytes one token stands for (logprobs' "token"), and the text of a token sequence.
  virtual std::string token_text(int32_t id) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int n_ctx() const = 0;
  virtual int n_vocab() const = 0;  // token ids are in [0, n_vocab)
  // As Engine::add_request / abort / metrics: throws QueueFull when the queue is full and Error
  // for a request the engine refuses; the callback runs on the stepping thread.
  virtual uint64_t add_request(RequestParams params, OutputCallback on_output) = 0;
  virtual void abort(uint64_t id) = 0;
  virtual EngineMetrics metrics() const = 0;
  // The constraint compiled for this model's vocabulary (GrammarCompiler: cached, time-bounded, on
  // the caller's thread). Throws ConstraintError; a backend without a vocabulary refuses every one.
  virtual std::shared_ptr<const CompiledConstraint> compile_constraint(const Constraint& c) {
    throw ConstraintError(std::string("this server cannot constrain outputs (") + to_string(c.kind) + ")");
  }
};

}  // namespace mpkv::server
