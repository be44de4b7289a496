// A progress bar on stderr for long work (ppl, calibration, eval): "label [=====>    ] 12/40 3.1s eta 7.2s".
// Redraws at most 10 times a second; silent when stderr is not a terminal unless forced, so logs
// stay clean (a final line is always printed by finish()).
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace mpkv {

class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total, bool enabled = true);
  void update(size_t done, const std::string& extra = "");
  void finish(const std::string& extra = "");

 private:
  void draw(size_t done, const std::string& extra, bool final_line);
  std::string label_;
  size_t total_;
  bool enabled_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace mpkv
