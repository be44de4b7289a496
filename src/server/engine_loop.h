// The serving loop: a thread that calls Engine::step() while there is work and sleeps in
// Engine::wait_for_work() while there is none.
#pragma once
#include <atomic>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace mpkv::server {

class EngineLoop {
 public:
  explicit EngineLoop(Engine& engine);  // starts stepping
  ~EngineLoop();                        // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Finishes the step under way and joins. No callback runs afterwards.
  void stop();
  // An exception escaped step() (an internal error: the engine's invariants are broken); the
  // loop stopped and the server should exit non-zero. what() is in failure().
  bool failed() const { return failed_.load(); }
  const std::string& failure() const { return failure_; }

 private:
  void run();

  Engine& engine_;
  std::atomic<bool> stop_{false}, failed_{false};
  std::string failure_;  // written before failed_ is set
  std::thread thread_;
};

}  // namespace mpkv::server
