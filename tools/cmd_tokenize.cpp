// mpkv tokenize: print the token ids of a text on one line.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"

namespace mpkv::cli {

void register_tokenize(CLI::App& app) {
  struct Args { std::string model, prompt; bool bos = false, no_special = false; };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the token ids of a text");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", a->prompt, "text to tokenize")->required();
  sub->add_flag("--bos", a->bos, "prepend BOS even when the model does not ask for it");
  sub->add_flag("--no-special", a->no_special, "treat special-token text (<|im_start|>) as plain text");
  sub->callback([a] {
    GgufReader gguf(a->model);
    const Tokenizer tok = Tokenizer::from_gguf(gguf);
    const auto ids = tok.encode(a->prompt, a->bos || tok.add_bos(), !a->no_special);
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  });
}

}  // namespace mpkv::cli
