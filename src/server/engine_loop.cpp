#include "server/engine_loop.h"

#include <cstdio>

namespace mpkv::server {

EngineLoop::EngineLoop(Engine& engine) : engine_(engine), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::run() {
  try {
    while (!stop_.load())
      if (!engine_.step()) engine_.wait_for_work(std::chrono::milliseconds(50));
  } catch (const std::exception& e) {
    failure_ = e.what();
    std::fprintf(stderr, "[server] internal error in the engine loop: %s\n", e.what());
    failed_.store(true);
  }
}

}  // namespace mpkv::server
