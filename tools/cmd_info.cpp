// mpkv info: architecture, hyperparameters and tensor types/sizes of a GGUF model.
//
// The file is read as GGUF first and the model built from it second, so a model mpkv cannot run
// (an unsupported architecture or tensor type) still shows its metadata and tensor list, the
// moment a user needs them, before the error (exit 1).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "cli_options.h"
#include "commands.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

// A metadata value on one line: scalars as they are, strings cut at 80 bytes, arrays as a count.
std::string value_summary(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::STRING: {
      const std::string& s = v.as_string();
      std::string out = s.substr(0, 80);
      for (char& c : out)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      return "'" + out + (s.size() > 80 ? "'... (" + std::to_string(s.size()) + " bytes)" : "'");
    }
    case GgufValueType::ARRAY: return "[" + std::to_string(v.as_array().size()) + " elements]";
    case GgufValueType::BOOL: return v.as_bool() ? "true" : "false";
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v.as_float());
      return b;
    }
    default: return std::to_string(v.as_int());
  }
}

void print_metadata(const GgufReader& g) {
  std::printf("metadata\n");
  for (const auto& [key, v] : g.metadata()) std::printf("  %-40s %s\n", key.c_str(), value_summary(v).c_str());
}

void print_tensor_summary(const GgufReader& g) {
  std::map<std::string, std::pair<int, size_t>> by_type;
  size_t total = 0;
  int64_t params = 0;
  for (const auto& t : g.tensors()) {
    auto& e = by_type[ggml_type_name((uint32_t)t.type)];
    e.first++;
    e.second += t.n_bytes;
    total += t.n_bytes;
    params += t.n_elements();
  }
  std::printf("parameters     %.2f M in %.2f MiB\n", params / 1e6, total / 1048576.0);
  std::printf("tensor types  ");
  for (const auto& [name, e] : by_type) std::printf(" %s: %d (%.2f MiB)", name.c_str(), e.first, e.second / 1048576.0);
  std::printf("\n");
}

void print_tensors(const GgufReader& g) {
  for (const auto& t : g.tensors()) {
    std::string dims;
    for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
    std::printf("  %-32s %-6s [%s] %zu bytes\n", t.name.c_str(), ggml_type_name((uint32_t)t.type).c_str(), dims.c_str(),
                t.n_bytes);
  }
}

// The RoPE frequency factors the model applies, when it has some: the tensor (rope_freqs.weight, or
// the longrope tensor the context chose), how many pairs and the range of the factors.
void print_rope_factors(const Model& m) {
  const VectorWeight& f = m.weights().rope_freqs;
  if (!f.data) return;
  const LongropeFactors lr = m.config().longrope.factors;
  float lo = f.data[0], hi = f.data[0];
  for (int64_t j = 1; j < f.n; ++j) lo = std::min(lo, f.data[j]), hi = std::max(hi, f.data[j]);
  std::printf("rope factors   %s, %lld pairs, %g .. %g (frequency of pair j divided by factor j)\n",
              lr == LongropeFactors::none ? "rope_freqs.weight" : longrope_tensor_name(lr), (long long)f.n, lo, hi);
}

}  // namespace

void register_info(CLI::App& app) {
  struct Args { std::string model; bool tensors = false, metadata = false; int n_ctx = 0; };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("info", "show a model's architecture, hyperparameters, metadata and tensors");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_flag("--tensors", a->tensors, "list every tensor");
  sub->add_flag("--metadata", a->metadata, "list every metadata key");
  sub->add_option("-c,--ctx-size", a->n_ctx,
                  "context per sequence to choose phi3's longrope factors for (0: the file's context_length)")
      ->capture_default_str()->check(integer_in(0, 1 << 30, "in [0, 1073741824]"));
  sub->callback([a] {
    const GgufReader g(a->model);  // a file that is no valid GGUF is an error before any output
    std::unique_ptr<Model> model;
    std::optional<std::string> failure;
    try {
      model = Model::load(a->model, a->n_ctx);
    } catch (const Error& e) {
      failure = e.what();
    }
    std::printf("file           %s (GGUF v%u, %zu tensors, %zu metadata keys)\n", a->model.c_str(), g.version(),
                g.tensors().size(), g.metadata().size());
    if (model) {
      std::printf("%s", model->config().describe().c_str());
      std::printf("tied output    %s\n", model->weights().tied_output ? "yes" : "no");
      print_rope_factors(*model);
    }
    if (!model || a->metadata) print_metadata(g);
    print_tensor_summary(g);
    if (!model || a->tensors) print_tensors(g);
    std::fflush(stdout);
    if (failure) throw Error("mpkv cannot run this model: " + *failure);
  });
}

}  // namespace mpkv::cli
