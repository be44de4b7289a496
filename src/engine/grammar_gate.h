// Where a constrained request's grammar begins (docs/structured_outputs.md, "Thinking before the
// answer"). A chat prompt that opens a thinking block (<think> at the end of the generation prompt:
// QwQ, the DeepSeek-R1 distills) makes the output thinking first, then the answer; the grammar
// applies to the answer only, as vLLM's reasoning parser does with structured outputs. Until the
// output holds the gate's tag (the end-of-thinking tag, as token ids: matched as the reasoning
// budget matches it, so a tag the model spells in other tokens is not seen) the gate is closed: the
// tokens are free text, except that the output may not end there (its mask holds every token but
// the end-of-generation and stop token ids), and the grammar's matcher sees none of them. The first
// token after the tag is the grammar's first. A gate without a tag is open from the start.
#pragma once
#include <cstdint>
#include <vector>

namespace mpkv {

class GrammarGate {
 public:
  GrammarGate() = default;  // open
  // tag: the token ids after which the grammar starts (non-empty); ending: the ids that would end
  // the output (masked while closed); n_vocab: the mask's width in tokens.
  GrammarGate(std::vector<int32_t> tag, const std::vector<int32_t>& ending, int n_vocab);
  bool open() const { return tag_.empty() || seen_; }
  // While closed: bit (t % 32) of word t / 32 set = token t may come next (the sampler's mask).
  const uint32_t* mask() const { return mask_.data(); }
  // A token emitted while closed (sampled or forced); opens the gate when it completes the tag.
  void accept(int32_t token);

 private:
  std::vector<int32_t> tag_;
  std::vector<int32_t> recent_;  // the last tokens, at most the tag's length
  bool seen_ = false;            // the tag was emitted
  std::vector<uint32_t> mask_;
};

}  // namespace mpkv
