// A byte-level vocabulary for the grammar tests: token b < 256 is byte b (GPT-2's byte code
// points, as the tiny test models store it), then <|im_start|> (256, CONTROL), <|im_end|> (257,
// CONTROL, end of generation) and "<fillerN>" tokens (USER_DEFINED) up to n_vocab.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace mpkv::test {

inline Tokenizer byte_tokenizer(int n_vocab = 300) {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_unicode_utf8(static_cast<uint8_t>(b))), types.push_back(TokenType::normal);
  tokens.push_back("<|im_start|>"), types.push_back(TokenType::control);
  tokens.push_back("<|im_end|>"), types.push_back(TokenType::control);
  while ((int)tokens.size() < n_vocab) tokens.push_back("<filler" + std::to_string(tokens.size()) + ">"), types.push_back(TokenType::user_defined);
  SpecialTokenIds sp;
  sp.bos = 256;
  sp.eos = 257;
  return Tokenizer(tokens, types, {}, "smollm", sp, false);
}

inline constexpr int32_t kByteEos = 257;

// A one-shot event (a test holds a compile with GrammarCompilerOptions::test_before_compile).
class Latch {
 public:
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

}  // namespace mpkv::test
