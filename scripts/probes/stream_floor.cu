// The floor of the large-T targets (docs/design/native-kernel.md, "Large T: what the copy paths reach"):
// the bytes of a native launch (prefix, delta and B block rows read, prefix and output written,
// per token, H=7168) moved with no arithmetic at all, in these shapes:
//   row:  one 896-thread CTA per token, each thread loading its 16-byte vector of every source row
//         up front, XOR, storing prefix and the output (the split floor probe's shape at large T);
//   hold: as row, every load held in registers across a CTA barrier;
//   reread: two passes, the blocks loaded again after a CTA barrier (from L2);
//   tma, lsu: the row staged in shared memory by bulk copies (whole source rows or chunks, from
//         one thread or 32) or by per-thread cp.async;
//   flat: a grid-stride loop over every (token, vector), 4 or 16 CTAs of 256 threads per SM, the same
//         loads and stores: the plainest streaming kernel.
// Timed as `bench` times kernels (CUDA-graph replays of 20 launches on rotating input sets, median
// per launch) and printed as a share of `bench`'s copy bandwidth (a 2 GiB device-to-device copy,
// read + written bytes) and of a copy of the same bytes.
// A measurement aid, not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o stream_floor scripts/probes/stream_floor.cu &&
//   ./stream_floor
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "graph_timing.h"

constexpr int kReplays = 30;  // graph replays per median

__device__ __forceinline__ void mix(uint4& a, const uint4& b) { a.x ^= b.x, a.y ^= b.y, a.z ^= b.z, a.w ^= b.w; }

template <int kBlocks>
__device__ __forceinline__ void one_vector(const RowSet& s, long t, int v) {
  const long e = t * kVectors + v;
  uint4 p = __ldcs(s.prefix + e);
  const uint4 d = __ldcs(s.delta + e);
  uint4 b[kBlocks];
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) b[k] = __ldcs(s.blocks + (t * kBlocks + k) * kVectors + v);
  mix(p, d);
  s.prefix[e] = p;
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) mix(p, b[k]);
  s.output[e] = p;
}

template <int kBlocks>
__global__ void __launch_bounds__(kVectors) row_shape(RowSet s) {
  one_vector<kBlocks>(s, blockIdx.x, threadIdx.x);
}

// hold: the split variant's shape at large T: every load held in registers across a CTA barrier
// (the mix after it depends on a value from shared memory, as the weights do on the logits).
template <int kBlocks>
__global__ void __launch_bounds__(kVectors, 1) hold_shape(RowSet s) {
  __shared__ unsigned shared_word;
  const long t = blockIdx.x, e = t * kVectors + threadIdx.x;
  uint4 p = __ldcs(s.prefix + e);
  const uint4 d = __ldcs(s.delta + e);
  uint4 b[kBlocks];
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) b[k] = __ldcs(s.blocks + (t * kBlocks + k) * kVectors + threadIdx.x);
  mix(p, d);
  s.prefix[e] = p;
  if (threadIdx.x == 0) shared_word = p.x;
  __syncthreads();
  const unsigned w = shared_word;
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) p.x += b[k].x * w, p.y += b[k].y * w, p.z += b[k].z * w, p.w += b[k].w * w;
  s.output[e] = p;
}

// reread: two passes; pass 1 folds each source as it lands (as dot products and sums of squares
// would), a CTA barrier, pass 2 loads the blocks again (from L2, if they are still there) and
// mixes them with a value from shared memory. Dynamic shared memory sets the CTAs per SM.
template <int kBlocks>
__global__ void __launch_bounds__(kVectors, 1) reread_shape(RowSet s) {
  extern __shared__ unsigned shared_words[];
  const long t = blockIdx.x, e = t * kVectors + threadIdx.x;
  uint4 p = s.prefix[e];
  const uint4 d = s.delta[e];
  mix(p, d);
  s.prefix[e] = p;
  uint4 folded = p;
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) mix(folded, s.blocks[(t * kBlocks + k) * kVectors + threadIdx.x]);
  if (threadIdx.x == 0) shared_words[0] = folded.x ^ folded.y ^ folded.z ^ folded.w;
  __syncthreads();
  const unsigned w = shared_words[0];
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) {
    const uint4 b = __ldcs(s.blocks + (t * kBlocks + k) * kVectors + threadIdx.x);
    p.x += b.x * w, p.y += b.y * w, p.z += b.z * w, p.w += b.w * w;
  }
  s.output[e] = p;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// Source row k of token t: prefix, delta, then the blocks.
template <int kBlocks>
__device__ __forceinline__ const uint4* source_row(const RowSet& s, long t, int k) {
  return k == 0   ? s.prefix + t * kVectors
         : k == 1 ? s.delta + t * kVectors
                  : s.blocks + (t * kBlocks + k - 2) * kVectors;
}

// tma: the row's sources land in shared memory by bulk copies (the ring's producer path) of
// kChunk bytes each, issued by the first kIssuers threads (one mbarrier counts the bytes);
// lsu (kIssuers = 0): each thread copies its own 16-byte vectors with cp.async (the load/store
// path) and waits for its own group. Both one CTA per row, the whole row in shared memory (143 KB
// at 8 blocks: one CTA per SM), XOR, store.
template <int kBlocks, int kChunk, int kIssuers>
__global__ void __launch_bounds__(kVectors, 1) staged_shape(RowSet s) {
  extern __shared__ uint4 staged[];  // [kBlocks + 2][kVectors]
  __shared__ alignas(8) unsigned long long full;
  const long t = blockIdx.x, e = t * kVectors + threadIdx.x;
  if constexpr (kIssuers > 0) {
    constexpr unsigned kRowBytes = kVectors * 16;
    constexpr int kChunksPerRow = int(kRowBytes) / kChunk;
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full)) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&full)),
                   "r"((kBlocks + 2) * kRowBytes)
                   : "memory");
    }
    __syncthreads();  // initialised and armed before any copy completes on it
    if (int(threadIdx.x) < kIssuers)
      for (int q = threadIdx.x; q < (kBlocks + 2) * kChunksPerRow; q += kIssuers) {
        const int k = q / kChunksPerRow, offset = (q % kChunksPerRow) * kChunk;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         smem_addr(reinterpret_cast<char*>(staged + k * kVectors) + offset)),
                     "l"(reinterpret_cast<const char*>(source_row<kBlocks>(s, t, k)) + offset), "n"(kChunk),
                     "r"(smem_addr(&full))
                     : "memory");
      }
    unsigned done = 0;
    while (!done)
      asm volatile(
          "{\n .reg .pred ready;\n mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], 0;\n selp.u32 %0, 1, 0, "
          "ready;\n}"
          : "=r"(done)
          : "r"(smem_addr(&full))
          : "memory");
  } else {
#pragma unroll
    for (int k = 0; k < kBlocks + 2; ++k)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(staged + k * kVectors + threadIdx.x)),
                   "l"(source_row<kBlocks>(s, t, k) + threadIdx.x)
                   : "memory");
    asm volatile("cp.async.commit_group;\n cp.async.wait_group 0;" ::: "memory");
  }
  uint4 p = staged[threadIdx.x];
  mix(p, staged[kVectors + threadIdx.x]);
  s.prefix[e] = p;
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) mix(p, staged[(2 + k) * kVectors + threadIdx.x]);
  s.output[e] = p;
}

template <int kBlocks>
__global__ void __launch_bounds__(256) flat_shape(RowSet s, long tokens) {
  const long total = tokens * kVectors;
  for (long i = long(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x)
    one_vector<kBlocks>(s, i / kVectors, int(i % kVectors));
}

// bench's copy bandwidth: read + written bytes of a 2 GiB device-to-device copy.
double copy_bandwidth(cudaStream_t stream) {
  const std::size_t bytes = std::size_t(2) << 30;
  unsigned char *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * double(bytes) / (ms[ms.size() / 2] * 1e-3);
}

template <int kBlocks>
void measure(cudaStream_t stream, long tokens, double copy_bw, int sms) {
  const std::size_t row = kVectors * sizeof(uint4);
  const double moved = double(tokens) * row * (kBlocks + 4);  // prefix, delta, blocks read; prefix, output written
  const std::vector<RowSet> rows = make_row_sets(tokens, kBlocks, 2, 64);
  const int sets = int(rows.size());
  const double same_bytes = same_bytes_copy_us(stream, kReplays, moved, sets);
  const double row_us = median_us(stream, kReplays, [&](int i, cudaStream_t s) {
    row_shape<kBlocks><<<unsigned(tokens), kVectors, 0, s>>>(rows[i % sets]);
    CHECK(cudaGetLastError());
  });
  const double hold_us = median_us(stream, kReplays, [&](int i, cudaStream_t s) {
    hold_shape<kBlocks><<<unsigned(tokens), kVectors, 0, s>>>(rows[i % sets]);
    CHECK(cudaGetLastError());
  });
  const auto share = [&](double us) { return 100.0 * moved / (us * 1e-6) / copy_bw; };
  std::printf(
      "T=%ld blocks=%d: %.1f MB, same-bytes copy %.1f us (%.1f %%), row %.1f us (%.1f %%), hold %.1f us (%.1f %%)",
      tokens, kBlocks, moved / 1e6, same_bytes, share(same_bytes), row_us, share(row_us), hold_us, share(hold_us));
  for (const int per_sm : {1, 2}) {
    const int bytes = per_sm == 1 ? 120 << 10 : 16;
    CHECK(cudaFuncSetAttribute(reread_shape<kBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize, 120 << 10));
    const double reread_us = median_us(stream, kReplays, [&](int i, cudaStream_t s) {
      reread_shape<kBlocks><<<unsigned(tokens), kVectors, bytes, s>>>(rows[i % sets]);
      CHECK(cudaGetLastError());
    });
    int resident = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, reread_shape<kBlocks>, kVectors, bytes));
    std::printf(", reread (%d CTA/SM) %.1f us (%.1f %%)", resident, reread_us, share(reread_us));
  }
  const int staged_bytes = (kBlocks + 2) * kVectors * 16;
  const auto staged = [&](auto kernel, const char* name) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, staged_bytes));
    const double us = median_us(stream, kReplays, [&](int i, cudaStream_t s) {
      kernel<<<unsigned(tokens), kVectors, staged_bytes, s>>>(rows[i % sets]);
      CHECK(cudaGetLastError());
    });
    std::printf(", %s %.1f us (%.1f %%)", name, us, share(us));
  };
  staged(staged_shape<kBlocks, 16, 0>, "lsu");
  staged(staged_shape<kBlocks, kVectors * 16, 1>, "tma 14336 B x1");
  staged(staged_shape<kBlocks, 3584, 1>, "tma 3584 B x1");
  staged(staged_shape<kBlocks, 3584, 32>, "tma 3584 B x32");
  staged(staged_shape<kBlocks, 1024, 32>, "tma 1024 B x32");
  for (const int per_sm : {4, 16}) {
    const double flat_us = median_us(stream, kReplays, [&](int i, cudaStream_t s) {
      flat_shape<kBlocks><<<unsigned(sms * per_sm), 256, 0, s>>>(rows[i % sets], tokens);
      CHECK(cudaGetLastError());
    });
    std::printf(", flat/%d %.1f us (%.1f %%)", per_sm, flat_us, share(flat_us));
  }
  std::printf("\n");
  free_row_sets(rows);
}

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double copy_bw = copy_bandwidth(stream);
  std::printf("copy bandwidth %.3f TB/s\n", copy_bw / 1e12);
  for (const long tokens : {4096L, 16384L}) {
    measure<1>(stream, tokens, copy_bw, sms);
    measure<4>(stream, tokens, copy_bw, sms);
    measure<8>(stream, tokens, copy_bw, sms);
  }
}
