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
  static std::unique_ptr<Model> load(const std::string& path);

  const GgufReader& gguf() const { return *gguf_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

 private:
  std::unique_ptr<GgufReader> gguf_;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace mpkv
