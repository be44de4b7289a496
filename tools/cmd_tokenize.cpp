// mpkv tokenize: the tokens of a text (-p or -f), as llama-tokenize prints them: one
// `id -> 'piece'` line per token, or with --ids the ids alone on one line.
#include <cstdio>
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::cli {

void register_tokenize(CLI::App& app) {
  struct Args { std::string model, prompt, file; bool bos = false, no_parse_special = false, ids = false; };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("tokenize", "print the tokens of a text (id -> 'piece', or --ids)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  CLI::Option* p = sub->add_option("-p,--prompt", a->prompt, "text to tokenize");
  CLI::Option* f = sub->add_option("-f,--file", a->file, "file whose text to tokenize");
  p->excludes(f);
  sub->add_flag("--ids", a->ids, "print only the ids, on one line");
  sub->add_flag("--bos", a->bos, "prepend BOS even when the model does not ask for it");
  sub->add_flag("--no-parse-special", a->no_parse_special, "treat special-token text (<|im_start|>) as plain text");
  sub->callback([a, sub] {
    MPKV_CHECK(sub->count("--prompt") + sub->count("--file") > 0, "give the text with -p TEXT or -f FILE");
    const std::string text = a->file.empty() ? a->prompt : read_text_file(a->file);
    GgufReader gguf(a->model);
    const Tokenizer tok = Tokenizer::from_gguf(gguf);
    const auto ids = tok.encode(text, a->bos || tok.add_bos(), !a->no_parse_special);
    if (a->ids) {
      for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
      std::printf("\n");
      return;
    }
    for (int32_t id : ids) {
      const std::string& piece = tok.token_piece(id);  // raw bytes (may be part of a UTF-8 character)
      std::printf("%6d -> '", id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::printf("'\n");
    }
  });
}

}  // namespace mpkv::cli
