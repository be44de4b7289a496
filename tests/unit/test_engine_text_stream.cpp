// TextStream (engine/text_stream.h): UTF-8 and stop-string hold-back, by hand-written cases.
#include <gtest/gtest.h>

#include "engine/text_stream.h"

namespace mpkv {
namespace {

std::string feed(TextStream& t, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += t.push(p);
  return out;
}

TEST(TextStream, PlainTextPassesThrough) {
  TextStream t({});
  EXPECT_EQ(t.push("Hello"), "Hello");
  EXPECT_EQ(t.push(" world"), " world");
  EXPECT_EQ(t.finish(), "");
}

TEST(TextStream, IncompleteUtf8IsHeldUntilComplete) {
  TextStream t({});
  // "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, split across tokens.
  EXPECT_EQ(t.push("a\xC3"), "a");
  EXPECT_EQ(t.push("\xA9"), "\xC3\xA9");
  EXPECT_EQ(t.push("\xE2\x82"), "");
  EXPECT_EQ(t.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(t.push("\xF0"), "");
  EXPECT_EQ(t.push("\x9F\x98"), "");
  EXPECT_EQ(t.push("\x80"), "\xF0\x9F\x98\x80");
}

TEST(TextStream, InvalidBytesAreNotHeldForever) {
  EXPECT_EQ(incomplete_utf8_tail("ab\x80"), 0u);   // stray continuation byte
  EXPECT_EQ(incomplete_utf8_tail("ab\xFF"), 0u);   // never valid
  EXPECT_EQ(incomplete_utf8_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("\xC3\xA9"), 0u);
  TextStream t({});
  EXPECT_EQ(t.push("ab\x80"), "ab\x80") << "bytes that can never complete are not held";
  EXPECT_EQ(t.finish(), "");
}

TEST(TextStream, CharacterCutOffByTheEndIsDropped) {
  // "€" = E2 82 AC split over two tokens and completed; then "😀" = F0 9F 98 80 starts and the
  // request ends (a length stop) after two of its four bytes.
  TextStream t({});
  std::string shown = t.push("x\xE2");
  shown += t.push("\x82\xAC y\xF0");
  shown += t.push("\x9F");
  EXPECT_EQ(shown, "x\xE2\x82\xAC y");
  EXPECT_EQ(t.finish(), "") << "the cut-off character is dropped, not shown";
}

TEST(TextStream, StopStringAcrossTokensIsCutAndNotReturned) {
  TextStream t({"END"});
  EXPECT_EQ(t.push("one E"), "one ");
  EXPECT_EQ(t.push("N"), "");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push("Dtwo"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.push("more"), "");
  EXPECT_EQ(t.finish(), "");
}

TEST(TextStream, FalseStartOfAStopStringIsReleased) {
  TextStream t({"END"});
  EXPECT_EQ(feed(t, {"E", "N", "x"}), "ENx");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push("EN"), "");
  EXPECT_EQ(t.finish(), "EN") << "held prefix released at the end";
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  TextStream t({"cd", "b"});
  EXPECT_EQ(t.push("abcd"), "a");
  EXPECT_TRUE(t.stopped());
}

TEST(TextStream, EmptyStopStringsAreIgnored) {
  TextStream t({""});
  EXPECT_EQ(t.push("abc"), "abc");
  EXPECT_FALSE(t.stopped());
}

}  // namespace
}  // namespace mpkv
