#include "model/model.h"

namespace mpkv {

std::unique_ptr<Model> Model::load(const std::string& path, int n_ctx) {
  auto m = std::unique_ptr<Model>(new Model());
  m->gguf_ = std::make_unique<GgufReader>(path);
  m->config_ = ModelConfig::from_gguf(*m->gguf_, n_ctx);
  m->weights_ = ModelWeights::from_gguf(*m->gguf_, m->config_);
  return m;
}

}  // namespace mpkv
