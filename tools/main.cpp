// mpkv: command-line entry point. Every error prints one "error: ..." line and exits 1: a bad
// command line (CLI11's parse errors, rewritten) as much as bad input found later (mpkv::Error).
// Exit code 2 means an internal error (a broken invariant), not something the user did.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "util/error.h"

#ifndef MPKV_VERSION
#define MPKV_VERSION "unknown"
#endif

namespace {

// OpenMP threads that busy-wait between parallel regions steal the cores other processes need,
// and on a shared machine they collapse (docs/cli.md, "Threads"). libgomp reads OMP_WAIT_POLICY
// once, when it is loaded, so when the user has not chosen one the process re-executes itself with
// the passive policy set. Returns only when no re-exec happened (or it failed).
void default_to_passive_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);  // on failure: go on with libgomp's default policy
}

// llama.cpp's multi-letter single-dash spellings, which CLI11 cannot name: rewritten to their long forms.
std::vector<char*> rewrite_llama_aliases(int argc, char** argv) {
  static const char* const kAliases[][2] = {{"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}};
  std::vector<char*> out(argv, argv + argc);
  for (char*& a : out)
    for (const auto& [from, to] : kAliases)
      if (std::strcmp(a, from) == 0) a = const_cast<char*>(to);
  return out;
}

// "error: ..." for a first word that is no subcommand (CLI11 would say "A subcommand is required").
bool check_subcommand(const CLI::App& app, int argc, char** argv) {
  std::string names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names += " " + s->get_name();
  if (argc < 2) {
    std::fprintf(stderr, "error: give a subcommand:%s (mpkv --help)\n", names.c_str());
    return false;
  }
  const std::string first = argv[1];
  if (first.empty() || first[0] == '-') return true;  // --help, --version, or an error CLI11 reports
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name() == first) return true;
  std::string hint;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name().rfind(first, 0) == 0) hint += (hint.empty() ? "" : " or ") + ("'" + s->get_name() + "'");
  std::fprintf(stderr, "error: unknown subcommand '%s'%s; subcommands:%s\n", first.c_str(),
               hint.empty() ? "" : (" (did you mean " + hint + "?)").c_str(), names.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  default_to_passive_waiting(argv);
  CLI::App app{"mpkv: LLM inference with a mixed-precision, progressively quantized KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mpkv ") + MPKV_VERSION);
  // The last value of a repeated option wins (llama.cpp's habit); list options opt out (TakeAll).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
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
  if (!check_subcommand(app, argc, argv)) return 1;
  std::vector<char*> args = rewrite_llama_aliases(argc, argv);
  try {
    app.parse((int)args.size(), args.data());
  } catch (const mpkv::cli::Interrupted&) {
    return 130;  // Ctrl-C: the summary is printed
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // Error: exit 1; InternalError or anything else: exit 2
    std::fflush(stdout);
    const mpkv::ErrorReport r = mpkv::report_for(e);
    std::fprintf(stderr, "%s\n", r.line.c_str());
    return r.exit_code;
  }
  return 0;
}
