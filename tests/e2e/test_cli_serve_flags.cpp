// `mpkv serve`'s connection options (docs/cli.md, "serve's connection options"): each out-of-range
// value is an error (exit 1, one line naming the option) before anything listens or loads.
#include <gtest/gtest.h>

#include <string>

#include "test_support.h"

namespace mpkv {
namespace {

TEST(CliServeFlags, OutOfRangeConnectionOptionsAreErrorsBeforeListening) {
  for (const std::string opt : {"--header-timeout 0", "--body-timeout 0", "--write-timeout 3601",
                                "--max-connections 0", "--max-streams-per-client 0", "--http-threads 0",
                                "--reasoning-budget -2"}) {
    SCOPED_TRACE(opt);
    const test::CliResult r = test::run_cli("serve -m no_such_model.gguf --port 0 " + opt);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(opt.substr(0, opt.find(' '))), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
  }
}

TEST(CliServeFlags, HelpListsTheConnectionOptionsWithTheirDefaults) {
  const test::CliResult r = test::run_cli("serve --help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"--header-timeout INT:in [1, 3600]=10", "--body-timeout INT:in [1, 3600]=30",
                        "--write-timeout INT:in [1, 3600]=30", "--max-connections INT:>= 1=1024",
                        "--max-streams-per-client INT:>= 1=64"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

}  // namespace
}  // namespace mpkv
