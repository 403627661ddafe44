// The floor of the split variant's shape (docs/design/native-kernel.md, "Decode sizes"): every thread
// loads its 16-byte vector of a row's source rows (prefix, delta, 4 or 8 blocks, H=7168) up front,
// XORs them (no arithmetic), stores prefix early and the output after 0, 1 or 2 barriers (cluster
// barriers for clusters of 2-8 CTAs per row, __syncthreads for one CTA per row). With
// `arithmetic`, the least a row's arithmetic can be instead of the XOR: p = prefix + delta, every
// element of each source unpacked, its dot with a gate and its square summed (pass 1),
// a per-thread weight per source, the mix (pass 2, unpacking again), its square summed, the output
// scaled and packed; no reductions, no softmax, no exchanged values (the barriers stand for the two
// exchanges). Timed as `bench` times kernels: CUDA-graph replays of 20 launches on rotating input
// sets, median per launch.
// A measurement aid, not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o split_floor scripts/probes/split_floor.cu &&
//   ./split_floor
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "graph_timing.h"

namespace cg = cooperative_groups;

constexpr int kReplays = 200;  // graph replays per median

__device__ float low_bf16(unsigned word) { return __uint_as_float(word << 16); }
__device__ float high_bf16(unsigned word) { return __uint_as_float(word & 0xffff0000u); }
__device__ unsigned pack_bf16(float low, float high) {
  unsigned packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
  return packed;
}
__device__ void unpack(const uint4& v, float (&x)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) x[2 * i] = low_bf16(w[i]), x[2 * i + 1] = high_bf16(w[i]);
}
__device__ uint4 pack(const float (&x)[8]) {
  return {pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7])};
}

template <int kBarriers, bool kCluster>
__device__ void barriers() {
#pragma unroll
  for (int k = 0; k < kBarriers; ++k) {
    if constexpr (kCluster)
      cg::this_cluster().sync();
    else
      __syncthreads();
  }
}

template <int kBlocks, int kBarriers, bool kCluster, bool kArithmetic = false>
__global__ void split_shape(RowSet s, int cluster) {
  const int t = blockIdx.x / cluster, rank = blockIdx.x % cluster;
  const std::size_t e = std::size_t(t) * kVectors + rank * (kVectors / cluster) + threadIdx.x;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  uint4 p = __ldcs(s.prefix + e);
  const uint4 d = __ldcs(s.delta + e);
  uint4 b[kBlocks];
#pragma unroll
  for (int k = 0; k < kBlocks; ++k)
    b[k] = __ldcs(s.blocks + (std::size_t(t) * kBlocks + k) * kVectors + rank * (kVectors / cluster) + threadIdx.x);
  asm volatile("griddepcontrol.launch_dependents;");
  if constexpr (kArithmetic) {
    static_assert(kBarriers == 2, "the arithmetic shape has the kernel's two exchanges");
    float x[8], y[8];
    unpack(p, x);
    unpack(d, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] += y[i];
    p = pack(x);
    s.prefix[e] = p;
    const float gate = 1.0f + threadIdx.x * 1e-3f;
    float dot[kBlocks + 1] = {}, square[kBlocks + 1] = {};
#pragma unroll
    for (int k = 0; k <= kBlocks; ++k) {
      unpack(k < kBlocks ? b[k] : p, x);
#pragma unroll
      for (int i = 0; i < 8; ++i) dot[k] = fmaf(x[i], gate, dot[k]), square[k] = fmaf(x[i], x[i], square[k]);
    }
    barriers<1, kCluster>();
    float mix[8] = {};
#pragma unroll
    for (int k = 0; k <= kBlocks; ++k) {
      unpack(k < kBlocks ? b[k] : p, x);
      const float weight = dot[k] - square[k];
#pragma unroll
      for (int i = 0; i < 8; ++i) mix[i] = fmaf(weight, x[i], mix[i]);
    }
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum = fmaf(mix[i], mix[i], sum);
    barriers<1, kCluster>();
#pragma unroll
    for (int i = 0; i < 8; ++i) mix[i] *= sum;
    s.output[e] = pack(mix);
  } else {
    p.x ^= d.x, p.y ^= d.y, p.z ^= d.z, p.w ^= d.w;
    s.prefix[e] = p;
#pragma unroll
    for (int k = 0; k < kBlocks; ++k) p.x ^= b[k].x, p.y ^= b[k].y, p.z ^= b[k].z, p.w ^= b[k].w;
    barriers<kBarriers, kCluster>();
    s.output[e] = p;
  }
}

template <int kBlocks>
void time_shapes(cudaStream_t stream) {
  for (const int tokens : {1, 64, 128, 320}) {
    const std::vector<RowSet> rows = make_row_sets(tokens, kBlocks, 1, 256);
    const int sets = int(rows.size());
    // kBlocks + 2 rows read and 2 written per token.
    const double copy =
        same_bytes_copy_us(stream, kReplays, double(tokens) * kVectors * sizeof(uint4) * (kBlocks + 4), sets);
    std::printf("%d blocks, T=%d: same-bytes copy %.2f us\n", kBlocks, tokens, copy);
    for (const int cluster : {1, 2, 4, 8})
      for (const bool pdl : {false, true}) {
        const auto time = [&](auto kernel) {
          return median_us(stream, kReplays, [&](int i, cudaStream_t s) {
            cudaLaunchAttribute attributes[2]{};
            int count = 0;
            if (cluster > 1) {
              attributes[count].id = cudaLaunchAttributeClusterDimension;
              attributes[count++].val.clusterDim = {unsigned(cluster), 1, 1};
            }
            if (pdl) {
              attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
              attributes[count++].val.programmaticStreamSerializationAllowed = 1;
            }
            cudaLaunchConfig_t config{};
            config.gridDim = dim3(tokens * cluster);
            config.blockDim = dim3(kVectors / cluster);
            config.stream = s;
            config.attrs = attributes;
            config.numAttrs = count;
            CHECK(cudaLaunchKernelEx(&config, kernel, rows[i % sets], cluster));
            CHECK(cudaGetLastError());
          });
        };
        double us[4];
        if (cluster > 1) {
          us[0] = time(split_shape<kBlocks, 0, true>);
          us[1] = time(split_shape<kBlocks, 1, true>);
          us[2] = time(split_shape<kBlocks, 2, true>);
          us[3] = time(split_shape<kBlocks, 2, true, true>);
        } else {
          us[0] = time(split_shape<kBlocks, 0, false>);
          us[1] = time(split_shape<kBlocks, 1, false>);
          us[2] = time(split_shape<kBlocks, 2, false>);
          us[3] = time(split_shape<kBlocks, 2, false, true>);
        }
        std::printf(
            "%d blocks, T=%d cluster=%d pdl=%d: loads->stores %.2f | +1 barrier %.2f | +2 barriers %.2f | "
            "+2 barriers and the least arithmetic %.2f us\n",
            kBlocks, tokens, cluster, int(pdl), us[0], us[1], us[2], us[3]);
      }
    free_row_sets(rows);
  }
}

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  time_shapes<4>(stream);
  time_shapes<8>(stream);
}
