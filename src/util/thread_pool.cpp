// The pool behind parallel_for (thread_pool.h). One job at a time:
//   claim_   [gen:32][n_chunks:16][next:16]: a thread takes chunk `next` by a CAS that bumps it;
//            the generation makes a claim from a stale look at an older job fail.
//   pending_ chunks of the current job not yet finished; the caller returns when it reaches 0.
//   wake_    bumped once per job; idle workers spin on it, then sleep on it (futex via
//            std::atomic::wait).
// The job's fields (fn_, ctx_, n_, grain_) are written before claim_ is published and read only
// after a successful claim, when the job cannot finish (and be overwritten) before that chunk is done.
#include "util/thread_pool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/env_int.h"
#include "util/error.h"

namespace mpkv {

namespace {

// True on pool workers always, and on the caller while it runs a job: a parallel_for there is serial.
thread_local bool t_in_pool = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or `us` microseconds have passed; returns done().
template <class Done>
bool spin_until(Done&& done, int us) {
  if (done()) return true;
  if (us <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

constexpr uint64_t pack_claim(uint32_t gen, uint32_t n_chunks, uint32_t next) {
  return (uint64_t)gen << 32 | (uint64_t)n_chunks << 16 | next;
}
constexpr uint32_t claim_n(uint64_t c) { return (uint32_t)(c >> 16) & 0xffff; }
constexpr uint32_t claim_next(uint64_t c) { return (uint32_t)c & 0xffff; }

int read_spin_us() { return env_int("MPKV_POOL_SPIN_US", kDefaultPoolSpinUs, 0, 100000, "microseconds"); }

class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }
  ~Pool();

  // Runs one job on the caller and `workers` workers. The caller holds mu.
  void run(int workers, int64_t n, int64_t grain, ChunkFn fn, void* ctx);

  std::mutex mu;  // one job at a time; a second caller runs its loop serially

 private:
  Pool() : spin_us_(pool_spin_us()) {}
  void worker_main(int index, uint32_t seen);
  void claim_and_run();
  void run_chunk(uint32_t k);

  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  uint32_t gen_ = 0;

  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> pending_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<uint32_t> wake_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> active_workers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};  // a chunk of the current job threw

  std::mutex error_mu_;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
  const int spin_us_;
};

Pool::~Pool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Pool::run_chunk(uint32_t k) {
  const int64_t b = (int64_t)k * grain_, e = std::min(n_, b + grain_);
  if (!failed_.load(std::memory_order_relaxed)) {
    try {
      fn_(ctx_, b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) pending_.notify_all();
}

void Pool::claim_and_run() {
  uint64_t c = claim_.load(std::memory_order_acquire);
  while (claim_next(c) < claim_n(c)) {
    if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      run_chunk(claim_next(c));
  }
}

// `seen`: wake_ as the creator read it before bumping it for the job that started this worker. A
// worker that first runs after that bump (or after the destructor's) must still see it as new: read
// here, it would equal the latest value and the worker would sleep through the stop signal, and
// ~Pool's join would hang (seen at exit under load).
void Pool::worker_main(int index, uint32_t seen) {
  t_in_pool = true;
  for (;;) {
    if (stop_.load()) return;
    const bool active = index < active_workers_.load(std::memory_order_relaxed);
    auto new_job = [&] { return wake_.load(std::memory_order_acquire) != seen; };
    if (!active || !spin_until(new_job, spin_us_)) {
      // Sleep. The caller bumps wake_ before it reads sleepers_ (both seq_cst), so either it sees
      // this sleeper and notifies, or the wait below sees the new value and returns at once.
      sleepers_.fetch_add(1);
      while (wake_.load() == seen) wake_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    if (index < active_workers_.load(std::memory_order_relaxed)) claim_and_run();
  }
}

void Pool::run(int workers, int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  fn_ = fn;
  ctx_ = ctx;
  n_ = n;
  grain_ = grain;
  error_ = nullptr;
  failed_.store(false, std::memory_order_relaxed);
  const uint32_t n_chunks = (uint32_t)((n + grain - 1) / grain);
  const uint32_t seen = wake_.load();  // before this job's bump below
  while ((int)workers_.size() < workers) {
    const int index = (int)workers_.size();
    workers_.emplace_back([this, index, seen] { worker_main(index, seen); });
  }
  active_workers_.store(workers, std::memory_order_relaxed);
  pending_.store(n_chunks, std::memory_order_relaxed);
  claim_.store(pack_claim(++gen_, n_chunks, 0), std::memory_order_release);
  wake_.fetch_add(1);
  if (sleepers_.load() > 0) wake_.notify_all();

  t_in_pool = true;
  claim_and_run();
  // Wait only for chunks other threads claimed (a worker that never woke up claimed none).
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, spin_us_)) {
    caller_sleeping_.store(true);
    for (uint32_t p; (p = pending_.load()) != 0;) pending_.wait(p);
    caller_sleeping_.store(false);
  }
  t_in_pool = false;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace

int pool_spin_us() {
  static const int us = read_spin_us();
  return us;
}

int pool_threads() {
  if (t_in_pool || omp_in_parallel()) return 1;
  return std::max(1, omp_get_max_threads());
}

void parallel_for_chunks(int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  MPKV_ASSERT(grain >= 1, "parallel_for: grain " + std::to_string(grain) + " < 1");
  if (n <= 0) return;
  grain = std::max(grain, (n + kMaxPoolChunks - 1) / kMaxPoolChunks);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int threads = n_chunks > 1 ? (int)std::min<int64_t>(pool_threads(), n_chunks) : 1;
  if (threads > 1) {
    Pool& pool = Pool::instance();
    std::unique_lock<std::mutex> lock(pool.mu, std::try_to_lock);
    if (lock.owns_lock()) return pool.run(threads - 1, n, grain, fn, ctx);
  }
  for (int64_t b = 0; b < n; b += grain) fn(ctx, b, std::min(n, b + grain));
}

}  // namespace mpkv
