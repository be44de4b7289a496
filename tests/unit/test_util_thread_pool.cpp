// util/thread_pool: every item runs exactly once whatever the thread count, chunk boundaries depend
// only on (n, grain), the first exception reaches the caller, nested and concurrent calls run (serially) instead
// of deadlocking, and the thread count follows the OpenMP knob.
#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace mpkv {
namespace {

// Restores the OpenMP thread count a test changed.
struct ThreadsGuard {
  int saved = omp_get_max_threads();
  ~ThreadsGuard() { omp_set_num_threads(saved); }
};

// The chunks one parallel_for hands out, as a sorted set of [begin, end).
std::set<std::pair<int64_t, int64_t>> chunks_of(int64_t n, int64_t grain) {
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> out;
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    out.insert({b, e});
  });
  return out;
}

TEST(ThreadPool, EveryItemExactlyOnceAtEveryThreadCount) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          ASSERT_LE(e - b, grain);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "item " << i << " of " << n << ", grain " << grain << ", " << threads << " threads";
      }
    }
  }
}

TEST(ThreadPool, ChunksIndependentOfThreadCount) {
  ThreadsGuard guard;
  omp_set_num_threads(1);
  const auto one = chunks_of(1000, 7);
  ASSERT_EQ(one.size(), 143u);  // 142 chunks of 7, one of 6
  EXPECT_EQ(*one.rbegin(), (std::pair<int64_t, int64_t>{994, 1000}));
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(chunks_of(1000, 7), one) << threads << " threads";
  }
}

TEST(ThreadPool, GrainRaisedToBoundTheChunkCount) {
  const int64_t n = 3 * kMaxPoolChunks + 5;
  const auto c = chunks_of(n, 1);
  EXPECT_LE((int64_t)c.size(), kMaxPoolChunks);
  EXPECT_EQ(c.begin()->first, 0);
  EXPECT_EQ(c.rbegin()->second, n);
}

// A chunk that takes long (as if its thread were descheduled) does not stop the others: with two
// threads the other one finishes the remaining chunks, and the call returns when all are done.
TEST(ThreadPool, SlowChunkDoesNotLoseWork) {
  ThreadsGuard guard;
  omp_set_num_threads(2);
  std::vector<std::atomic<int>> hits(200);
  parallel_for(200, 1, [&](int64_t b, int64_t e) {
    if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, FirstExceptionReachesTheCaller) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_THROW(parallel_for(100, 1,
                              [&](int64_t b, int64_t) {
                                if (b == 37) throw std::runtime_error("chunk 37");
                              }),
                 std::runtime_error)
        << threads << " threads";
    // The pool is usable afterwards.
    std::atomic<int64_t> sum{0};
    parallel_for(100, 1, [&](int64_t b, int64_t) { sum.fetch_add(b); });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, NestedCallRunsSeriallyInsideAChunk) {
  ThreadsGuard guard;
  omp_set_num_threads(3);
  std::vector<std::atomic<int>> hits(16 * 16);
  parallel_for(16, 1, [&](int64_t i, int64_t) {
    EXPECT_EQ(pool_threads(), 1);
    parallel_for(16, 1, [&](int64_t j, int64_t) { hits[i * 16 + j].fetch_add(1); });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersBothComplete) {
  ThreadsGuard guard;
  omp_set_num_threads(2);
  std::vector<std::atomic<int>> a(5000), b(5000);
  auto fill = [](std::vector<std::atomic<int>>& v) {
    for (int rep = 0; rep < 50; ++rep)
      parallel_for((int64_t)v.size(), 16, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) v[i].fetch_add(1);
      });
  };
  std::thread other([&] { fill(b); });
  fill(a);
  other.join();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].load(), 50);
    ASSERT_EQ(b[i].load(), 50);
  }
}

TEST(ThreadPool, ThreadCountFollowsOpenMp) {
  ThreadsGuard guard;
  omp_set_num_threads(3);
  EXPECT_EQ(pool_threads(), 3);
  std::set<std::thread::id> ids;
  std::mutex mu;
  // Many slow-ish chunks so that the workers get some (they are not guaranteed to, so only the
  // upper bound is asserted).
  parallel_for(64, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_LE(ids.size(), 3u);
  omp_set_num_threads(2);
#pragma omp parallel num_threads(2)
  {
    EXPECT_EQ(pool_threads(), 1);  // inside an active OpenMP region: serial
  }
}

// A process that exits right after its first pooled job: workers created for that job may first
// run after ~Pool has signalled them to stop. They must still stop, or exit hangs in ~Pool's join
// (it did, under load, before the fix). Each child is a fresh process (threadsafe death-test
// style re-runs the binary), so its pool is new; a hang shows as this test timing out.
TEST(ThreadPoolDeathTest, ExitRightAfterTheFirstJobReturns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int i = 0; i < 20; ++i) {
    EXPECT_EXIT(
        {
          omp_set_num_threads(4);
          std::atomic<int> sum{0};
          parallel_for(64, 1, [&](int64_t b, int64_t) { sum.fetch_add((int)b); });
          std::exit(sum.load() == 63 * 64 / 2 ? 0 : 1);
        },
        testing::ExitedWithCode(0), "");
  }
}

}  // namespace
}  // namespace mpkv
