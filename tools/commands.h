// Each `mpkv` subcommand lives in its own cmd_<name>.cpp and registers itself here.
#pragma once
#include <CLI/CLI.hpp>

namespace mpkv::cli {

void register_generate(CLI::App& app);
void register_ppl(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_info(CLI::App& app);
void register_bench(CLI::App& app);
void register_distortion(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_eval(CLI::App& app);
void register_serve(CLI::App& app);

}  // namespace mpkv::cli
