// mpkv: command-line entry point. Errors from bad input (mpkv::Error) print "error: ..." and exit 1.
#include <cstdio>
#include <exception>

#include "cli_util.h"
#include "commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"mpkv: LLM inference with a mixed-precision, progressively quantized KV cache"};
  app.require_subcommand(1);
  mpkv::cli::register_generate(app);
  mpkv::cli::register_ppl(app);
  mpkv::cli::register_tokenize(app);
  mpkv::cli::register_info(app);
  mpkv::cli::register_bench(app);
  mpkv::cli::register_distortion(app);
  mpkv::cli::register_calibrate(app);
  mpkv::cli::register_eval(app);
  mpkv::cli::register_serve(app);
  mpkv::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mpkv::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
