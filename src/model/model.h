// A loaded model: the mapped GGUF file, its configuration and views of its weights.
#pragma once
#include <memory>
#include <string>

#include "gguf/gguf_reader.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace mpkv {

class Model {
 public:
  // Maps the file and validates architecture, hyperparameters and every tensor; throws Error.
  // n_ctx: the context per sequence the model will run with, which picks phi3's longrope factors
  // (ModelConfig::from_gguf; docs/models.md, "Longrope"). The commands pass theirs; 0 (tests, `mpkv
  // info` without -c) stands for the file's context_length, as llama.cpp's n_ctx 0 does.
  static std::unique_ptr<Model> load(const std::string& path, int n_ctx = 0);

  const GgufReader& gguf() const { return *gguf_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

 private:
  std::unique_ptr<GgufReader> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace mpkv
