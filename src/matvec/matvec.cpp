// The matvec driver: validates the matrix, quantizes the activations once, hands chunks of rows to
// the thread pool (util/thread_pool.h) and calls the kernel table's tile kernels (integer-dot types) or per-row dot
// products (float and fallback types). Either way each output element is computed by one fixed
// sequence of operations, whatever the number of activation rows or threads.
#include "matvec/matvec.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/dequant.h"
#include "util/error.h"
#include "util/env_int.h"
#include "util/thread_pool.h"

namespace mpkv {

namespace {

// Below this many weight bytes a matrix is done on the calling thread: handing out a job costs
// a few microseconds, about what one core needs to stream 64 KiB from cache.
constexpr size_t kMinParallelBytes = 64 * 1024;
// Weight bytes (times activation rows) per pool chunk. Chunks are claimed in order by whichever
// thread is free, so two threads streaming one matrix take alternate chunks: each thread's reads
// jump by a chunk at every chunk, and the kernels' prefetch of the next group lands in the other
// thread's chunk. Small chunks (16 KiB, one Q8_0 group of a 2048-column matrix) therefore cost
// bandwidth: on the 2-core EPYC VM a Llama-3.2-1B-shaped decode step streamed 11-12 GB/s with
// 2 threads, less than 1 thread's 14 GB/s. A job is cut into about kChunksPerThread chunks per
// thread (long contiguous runs, few jumps), no smaller than kMinChunkBytes (claiming one costs an
// atomic on a shared line) and no larger than kMaxChunkBytes (a thread the OS slows down holds up
// the others by at most one chunk). docs/results/speed.md, "Real shapes against llama.cpp".
constexpr size_t kMinChunkBytes = 16 * 1024, kMaxChunkBytes = 1024 * 1024;
constexpr size_t kChunksPerThread = 4;

// Weight bytes per chunk for a job of `total_bytes`.
size_t chunk_bytes(size_t total_bytes) {
  const size_t even = total_bytes / (kChunksPerThread * (size_t)std::max(1, pool_threads()));
  return std::clamp(even, kMinChunkBytes, kMaxChunkBytes);
}

// Items per chunk when each item costs `item_bytes` of weights, in a job of `total_bytes`.
int64_t chunk_items(size_t item_bytes, size_t total_bytes) {
  return std::max<int64_t>(1, (int64_t)(chunk_bytes(total_bytes) / std::max<size_t>(1, item_bytes)));
}

enum class MatvecPath { quant_dot, float_dot, dequant_fallback, unsupported };

MatvecPath path_for(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return MatvecPath::quant_dot;
    case GgmlType::F32: case GgmlType::F16:
      return MatvecPath::float_dot;
    case GgmlType::BF16:
      return MatvecPath::dequant_fallback;
    default:
      return MatvecPath::unsupported;
  }
}

// y[v*rows + r] = dot(row r, x_v) for every row and vector; `dot_rows(row_ptr, r)` does one row for
// all n vectors (weight row stays in L1 across them).
template <class RowFn>
void for_each_row(const WeightMatrix& w, RowFn&& dot_rows) {
  const bool parallel = (size_t)w.rows * w.row_bytes >= kMinParallelBytes;
  parallel_for(w.rows, parallel ? chunk_items(w.row_bytes, (size_t)w.rows * w.row_bytes) : w.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) dot_rows(w.data + (size_t)r * w.row_bytes, r);
  });
}

// Activations up to this many values are quantized on the calling thread, without a pool job:
// quantizing took ~13 ns per block of 32 (16 x 576 values: 3.8 us, 16 x 1536: 10 us, thread CPU
// time under load, AVX2 and AVX-512 alike), about what a pool job's wake-up and join cost against
// the half a second thread would take over. So a decode batch (16 rows: 9K-25K values) quantizes
// on the caller, and a layer waits for its threads 4 times fewer (docs/results/engine_speed.md,
// packed weights); prefill splits.
constexpr int64_t kSerialQuantizeValues = 64 * 1024;

// Activation rows per panel: a panel's quantized blocks (kActPanel * cols / 32 * 40 bytes, 120 KiB
// for 1536 columns) stay in L2 while a thread's weight rows stream past them.
constexpr int kActPanel = 64;

// How far ahead of the tile being multiplied its weights are prefetched (matvec_prefetch_bytes()):
// without it one core streamed the 170 MiB Q8_0 head of Gemma-3-270M at 8-10 GB/s and its 2-row
// Q6_K / Q4_K ffn_down tiles at 4-5 GB/s (the hardware prefetcher alone keeps too few lines in
// flight); with it a decode step's matvecs take ~0.8x the CPU time, and distances from 1 to 8 KiB
// did about equally well (bench_matvec --model; docs/results/engine_speed.md, Gemma section).
constexpr int kDefaultPrefetchBytes = 2048;

int read_prefetch_bytes() {
  return env_int("MPKV_MATVEC_PREFETCH_BYTES", kDefaultPrefetchBytes, 0, kMaxPrefetchBytes, "bytes");
}

// Prefetches the cache lines of bytes [begin, end) of `data`, end clipped to `size`, into every
// cache level (a non-temporal hint did no better for decode, and a batch's later activation tiles
// reuse the lines).
inline void prefetch_bytes(const uint8_t* data, size_t begin, size_t end, size_t size) {
  for (size_t o = begin; o < std::min(end, size); o += 64) __builtin_prefetch(data + o, 0, 3);
}

// One matrix of a tile job: its kernel and output, the tile height R and how its tiles are chunked.
// A packed matrix (w->packed set and the table has its kernel) runs `packed` on groups of kPackRows.
struct TileJob {
  QuantTileFn tile;
  PackedTileFn packed;
  const WeightMatrix* w;
  float* y;
  int R = 1;
  int64_t n_tiles = 0, grain = 1, first_chunk = 0;
};

// The packed path of run_tiles: tiles [t0, t1) are groups of kPackRows rows; each group meets a
// panel of activation rows in one kernel call, whose [nv, kPackRows] results are copied into y
// (rows past the matrix dropped).
void run_packed_groups(const TileJob& j, const BlockQ8Act* xq, int n, int64_t t0, int64_t t1, size_t ahead) {
  const WeightMatrix& w = *j.w;
  const PackedMatrix& p = *w.packed;
  const int64_t rows = w.rows, nb = w.cols / kActBlock;
  float out[kActPanel * kPackRows];
  for (int v0 = 0; v0 < n; v0 += kActPanel) {
    const int nv = std::min(n - v0, kActPanel);
    for (int64_t g = t0; g < t1; ++g) {
      if (ahead > 0 && v0 == 0 && !packed_kernel_prefetches(p.type())) {  // later panels find them in cache
        const size_t at = (size_t)g * p.group_bytes() + ahead;
        prefetch_bytes(p.group(0), at, at + p.group_bytes(), p.size_bytes());
      }
      j.packed(p.group(g), nb, xq + (size_t)v0 * nb, (size_t)nb, nv, out);
      const int nr = (int)std::min<int64_t>(kPackRows, rows - g * kPackRows);
      for (int v = 0; v < nv; ++v)
        std::copy(out + v * kPackRows, out + v * kPackRows + nr, j.y + (size_t)(v0 + v) * rows + g * kPackRows);
    }
  }
}

// y[v * rows + r] = dot(row r, xq_v) for weight-row tiles [t0, t1) of one matrix: activation panels,
// then weight tiles of R rows, then activation tiles of kQuantTileMax rows. Every (row, activation)
// pair gets the tile kernel's fixed arithmetic, so neither n, nor the tile shapes at the edges, nor
// the chunks or threads change any result. In the first panel each weight tile first prefetches
// the bytes `ahead` bytes further on (0: none).
void run_tiles(const TileJob& j, const BlockQ8Act* xq, int n, int64_t t0, int64_t t1, size_t ahead) {
  if (j.packed) return run_packed_groups(j, xq, n, t0, t1, ahead);
  const WeightMatrix& w = *j.w;
  const int64_t rows = w.rows, nb = w.cols / kActBlock;
  const size_t size = (size_t)rows * w.row_bytes;
  for (int v0 = 0; v0 < n; v0 += kActPanel) {
    const int v_end = std::min(n, v0 + kActPanel);
    for (int64_t ti = t0; ti < t1; ++ti) {
      const int64_t r = ti * j.R;
      const int nr = (int)std::min<int64_t>(j.R, rows - r);
      if (ahead > 0 && v0 == 0) {  // later panels find the chunk's weights in cache
        const size_t at = (size_t)r * w.row_bytes + ahead;
        prefetch_bytes(w.data, at, at + (size_t)nr * w.row_bytes, size);
      }
      for (int v = v0; v < v_end; v += kQuantTileMax) {
        j.tile(w.data + (size_t)r * w.row_bytes, w.row_bytes, nr, xq + (size_t)v * nb, (size_t)nb,
               std::min(kQuantTileMax, v_end - v), w.cols, j.y + (size_t)v * rows + r, (size_t)rows);
      }
    }
  }
}

// Every matrix of `jobs` times the same quantized activations xq [n, cols/32], as ONE pool job: the
// chunks of all matrices in sequence (a decode step then waits for the threads once for Q, K and V
// together, once for gate and up).
void quant_tiles(std::vector<TileJob>& jobs, const BlockQ8Act* xq, int n) {
  const size_t ahead = (size_t)matvec_prefetch_bytes();
  size_t total_bytes = 0;
  for (const TileJob& j : jobs) total_bytes += (size_t)j.w->rows * j.w->row_bytes * (size_t)n;
  const bool parallel = total_bytes >= kMinParallelBytes;
  int64_t n_chunks = 0;
  for (TileJob& j : jobs) {
    // Tile shape (speed only; results are the same for every shape): 2 weight rows x up to 4
    // activation rows (8 accumulators; each weight block decoded once per 4 activation rows, two
    // independent fma chains when n = 1), except for matrices far larger than the caches (the 28 MiB
    // Q8_0 output head), where one weight row at a time streams best (bench_matvec --batch and a
    // tile-shape sweep on the 2-core EPYC VM: 2-4 interleaved row streams took 1.5-2x the CPU time;
    // with the weight prefetch of run_tiles, 2 rows did about as well as 1 on the Gemma head, 4 worse).
    constexpr size_t kStreamingBytes = 8u << 20;
    j.R = j.packed ? kPackRows : (size_t)j.w->rows * j.w->row_bytes > kStreamingBytes ? 1 : 2;
    j.n_tiles = (j.w->rows + j.R - 1) / j.R;
    j.grain = parallel ? chunk_items((size_t)j.R * j.w->row_bytes * (size_t)n, total_bytes) : std::max<int64_t>(1, j.n_tiles);
    j.first_chunk = n_chunks;
    n_chunks += (j.n_tiles + j.grain - 1) / j.grain;
  }
  parallel_for(n_chunks, parallel ? 1 : std::max<int64_t>(1, n_chunks), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      size_t m = jobs.size() - 1;
      while (jobs[m].first_chunk > c) --m;
      const TileJob& j = jobs[m];
      const int64_t t0 = (c - j.first_chunk) * j.grain;
      run_tiles(j, xq, n, t0, std::min(j.n_tiles, t0 + j.grain), ahead);
    }
  });
}

// The integer-dot path for matrices that share x (all quant_dot types, same cols): x quantized once.
void quant_dot_shared(const MatvecKernels& k, std::initializer_list<MatmulTarget> targets, const float* x, int n) {
  const int64_t cols = targets.begin()->w->cols, nb = cols / kActBlock;
  // xq: [n, cols/32] activation blocks, each row quantized on its own (so independently of n).
  thread_local std::vector<BlockQ8Act> xq_buf;
  xq_buf.resize((size_t)n * nb);
  BlockQ8Act* xq = xq_buf.data();
  parallel_for(n, (int64_t)n * cols > kSerialQuantizeValues ? 4 : n, [&](int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) k.quantize_act(x + (size_t)v * cols, xq + (size_t)v * nb, cols);
  });
  std::vector<TileJob> jobs;
  for (const MatmulTarget& t : targets)
    if (t.w->rows > 0) jobs.push_back({k.quant_tile(t.w->type), t.w->packed ? k.packed_tile(t.w->type) : nullptr, t.w, t.y});
  if (!jobs.empty()) quant_tiles(jobs, xq, n);
}

}  // namespace

namespace {
std::atomic<int>& prefetch_setting() {
  static std::atomic<int> bytes{read_prefetch_bytes()};
  return bytes;
}
}  // namespace

int matvec_prefetch_bytes() { return prefetch_setting().load(std::memory_order_relaxed); }

void set_matvec_prefetch_bytes(int bytes) {
  MPKV_CHECK(bytes >= 0 && bytes <= kMaxPrefetchBytes,
             "matvec prefetch distance must be in [0, " + std::to_string(kMaxPrefetchBytes) + "] bytes, got " +
                 std::to_string(bytes));
  prefetch_setting().store(bytes, std::memory_order_relaxed);
}

bool matvec_uses_dequant_fallback(GgmlType type) { return path_for(type) == MatvecPath::dequant_fallback; }

void check_weight_matrix(const WeightMatrix& w) {
  const uint32_t id = static_cast<uint32_t>(w.type);
  MPKV_CHECK(path_for(w.type) != MatvecPath::unsupported,
             "matvec: weight type " + ggml_type_name(id) +
                 " is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
  const GgmlTypeInfo* info = ggml_type_info(id);
  MPKV_CHECK(info != nullptr, "matvec: no type info for " + ggml_type_name(id));
  MPKV_CHECK(w.rows >= 0 && w.cols > 0, "matvec: bad " + std::string(info->name) + " matrix shape [" +
                                            std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]");
  MPKV_CHECK(w.cols % info->block_size == 0, "matvec: " + std::to_string(w.cols) + " columns of " + info->name +
                                                 " is not a multiple of its block size " +
                                                 std::to_string(info->block_size));
  const size_t need = ggml_row_bytes(w.type, w.cols);
  MPKV_CHECK(w.row_bytes >= need, "matvec: row_bytes " + std::to_string(w.row_bytes) + " is less than the " +
                                      std::to_string(need) + " bytes of " + std::to_string(w.cols) + " " +
                                      info->name + " elements");
  MPKV_CHECK(w.rows == 0 || w.data != nullptr, "matvec: weight data is null");
  MPKV_CHECK(w.packed == nullptr || (w.packed->type() == w.type && w.packed->rows() == w.rows && w.packed->cols() == w.cols),
             "matvec: the packed copy does not match the matrix's type and shape");
}

void matmul_rows_with(const MatvecKernels& k, const WeightMatrix& w, const float* x, float* y, int n) {
  check_weight_matrix(w);
  MPKV_ASSERT(n >= 0, "matmul_rows: negative vector count " + std::to_string(n));
  if (n == 0 || w.rows == 0) return;
  MPKV_ASSERT(x != nullptr && y != nullptr, "matmul_rows: null x or y");
  const int64_t rows = w.rows, cols = w.cols;

  switch (path_for(w.type)) {
    case MatvecPath::quant_dot:
      quant_dot_shared(k, {{&w, y}}, x, n);
      return;
    case MatvecPath::float_dot: {
      const FloatDotFn dot = k.float_dot(w.type);
      for_each_row(w, [&](const uint8_t* row, int64_t r) {
        for (int v = 0; v < n; ++v) y[(size_t)v * rows + r] = dot(row, x + (size_t)v * cols, cols);
      });
      return;
    }
    case MatvecPath::dequant_fallback: {
      // SLOW PATH: dequantize the row to fp32 in a per-thread buffer, then a float dot per vector.
      // (The pool rethrows the first exception a chunk throws.)
      for_each_row(w, [&](const uint8_t* row, int64_t r) {
        thread_local std::vector<float> buf;
        buf.resize(cols);
        dequantize_row(w.type, row, buf.data(), cols);
        for (int v = 0; v < n; ++v) y[(size_t)v * rows + r] = k.dot_f32(buf.data(), x + (size_t)v * cols, cols);
      });
      return;
    }
    case MatvecPath::unsupported:
      break;
  }
  throw Error("matvec: unsupported weight type " + ggml_type_name(static_cast<uint32_t>(w.type)));
}

void matmul_rows(const WeightMatrix& w, const float* x, float* y, int n) {
  matmul_rows_with(active_matvec_kernels(), w, x, y, n);
}

void matmul_rows_shared_with(const MatvecKernels& k, std::initializer_list<MatmulTarget> targets, const float* x, int n) {
  MPKV_ASSERT(targets.size() > 0, "matmul_rows_shared: no matrices");
  bool grouped = true;
  for (const MatmulTarget& t : targets) {
    MPKV_ASSERT(t.w != nullptr, "matmul_rows_shared: null matrix");
    check_weight_matrix(*t.w);
    grouped = grouped && path_for(t.w->type) == MatvecPath::quant_dot && t.w->cols == targets.begin()->w->cols;
  }
  MPKV_ASSERT(n >= 0, "matmul_rows_shared: negative vector count " + std::to_string(n));
  if (n == 0) return;
  MPKV_ASSERT(x != nullptr, "matmul_rows_shared: null x");
  for (const MatmulTarget& t : targets) MPKV_ASSERT(t.w->rows == 0 || t.y != nullptr, "matmul_rows_shared: null y");
  if (!grouped) {
    for (const MatmulTarget& t : targets) matmul_rows_with(k, *t.w, x, t.y, n);
    return;
  }
  quant_dot_shared(k, targets, x, n);
}

void matmul_rows_shared(std::initializer_list<MatmulTarget> targets, const float* x, int n) {
  matmul_rows_shared_with(active_matvec_kernels(), targets, x, n);
}

void matvec(const WeightMatrix& w, const float* x, float* y) { matmul_rows(w, x, y, 1); }

}  // namespace mpkv
