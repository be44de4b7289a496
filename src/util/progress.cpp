#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace mpkv {

ProgressBar::ProgressBar(std::string label, size_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(2)) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void ProgressBar::update(size_t done, const std::string& extra) {
  if (!enabled_ || !tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  draw(done, extra, false);
}

void ProgressBar::finish(const std::string& extra) {
  if (!enabled_) return;
  draw(total_, extra, true);
}

void ProgressBar::draw(size_t done, const std::string& extra, bool final_line) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int width = 30;
  const double frac = total_ ? (double)done / (double)total_ : 1.0;
  const int fill = (int)(frac * width);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
  bar[width] = 0;
  const double eta = done ? elapsed * (double)(total_ - done) / (double)done : 0.0;
  std::fprintf(stderr, "%s%s [%s] %zu/%zu %.1fs", tty_ ? "\r" : "", label_.c_str(), bar, done, total_, elapsed);
  if (!final_line) std::fprintf(stderr, " eta %.1fs", eta);
  if (!extra.empty()) std::fprintf(stderr, " %s", extra.c_str());
  std::fprintf(stderr, final_line ? "\n" : "\033[K");
  std::fflush(stderr);
}

}  // namespace mpkv
