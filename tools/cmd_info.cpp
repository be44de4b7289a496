// mpkv info: architecture, hyperparameters and tensor types/sizes of a GGUF model.
#include <cstdio>
#include <map>
#include <memory>

#include "commands.h"
#include "model/model.h"

namespace mpkv::cli {

void register_info(CLI::App& app) {
  struct Args { std::string model; bool tensors = false; };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("info", "show a model's architecture, hyperparameters and tensors");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_flag("--tensors", a->tensors, "list every tensor");
  sub->callback([a] {
    auto model = Model::load(a->model);
    const GgufReader& g = model->gguf();
    std::printf("file           %s (GGUF v%u, %zu tensors, %zu metadata keys)\n", a->model.c_str(), g.version(),
                g.tensors().size(), g.metadata().size());
    std::printf("%s", model->config().describe().c_str());
    std::printf("tied output    %s\n", model->weights().tied_output ? "yes" : "no");
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
    if (a->tensors) {
      for (const auto& t : g.tensors()) {
        std::string dims;
        for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
        std::printf("  %-32s %-6s [%s] %zu bytes\n", t.name.c_str(), ggml_type_name((uint32_t)t.type).c_str(),
                    dims.c_str(), t.n_bytes);
      }
    }
  });
}

}  // namespace mpkv::cli
