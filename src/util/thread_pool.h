// The hot loops' thread pool: persistent workers that spin briefly between jobs, then sleep on a
// futex, and hand out work in small chunks from one atomic counter (docs/design.md, "Threads").
//
// Why not `#pragma omp parallel`: a decode step opens about 200 parallel regions (seven matmuls a
// layer, attention, the output head), each a few tens of microseconds long. With libgomp's passive
// wait every region pays a futex wake-up; with its active wait the spinning threads collapse when
// another process wants the core; and a static split makes a thread that the OS slowed down the
// straggler of every region. Here a chunk is claimed only by a thread that is running, so a slowed
// thread simply takes fewer chunks, and the caller waits only for chunks already claimed.
//
// Results: `body` sees each chunk [begin, end) exactly once, on some thread. Chunk boundaries depend
// only on (n, grain), never on the number of threads, so any body that writes disjoint outputs per
// item gives bitwise the same results at every thread count.
#pragma once
#include <cstdint>
#include <type_traits>

namespace mpkv {

using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);

// Calls fn(ctx, begin, end) for the chunks [k * g, min(n, (k + 1) * g)) of [0, n), where g = grain
// (raised when n / grain would exceed kMaxPoolChunks). Runs on pool_threads() threads, the caller
// included; returns when every chunk is done. The first exception a chunk throws is rethrown here;
// chunks not started by then are skipped.
void parallel_for_chunks(int64_t n, int64_t grain, ChunkFn fn, void* ctx);

template <class Body>
void parallel_for(int64_t n, int64_t grain, Body&& body) {
  using B = std::remove_reference_t<Body>;
  parallel_for_chunks(
      n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<B*>(c))(b, e); }, (void*)&body);
}

// Most chunks one parallel_for hands out (the claim counter is 16 bits wide).
constexpr int64_t kMaxPoolChunks = 65535;

// Threads a parallel_for started here would use: omp_get_max_threads() (the one thread-count knob:
// `mpkv -t`, OMP_NUM_THREADS, omp_set_num_threads), or 1 inside an active OpenMP region or inside
// a pool chunk (nested loops run serially).
int pool_threads();

// How long an idle worker (and a caller waiting for claimed chunks) spins before it sleeps, in
// microseconds: MPKV_POOL_SPIN_US if set (an integer in [0, 100000]; anything else is an Error),
// else kDefaultPoolSpinUs. Read once.
int pool_spin_us();
constexpr int kDefaultPoolSpinUs = 100;

}  // namespace mpkv
