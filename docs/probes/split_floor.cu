// The floor of the split variant's shape (docs/native-kernel.md, "Decode sizes"): every thread
// loads its 16-byte vector of a row's 10 source rows (prefix, delta, 8 blocks, H=7168) up front,
// XORs them (no arithmetic), stores prefix early and the output after 0, 1 or 2 barriers (cluster
// barriers for clusters of 2-8 CTAs per row, __syncthreads for one CTA per row). Timed as `bench`
// times kernels: CUDA-graph replays of 20 launches on rotating input sets, median per launch.
// A measurement aid, not part of the build:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o split_floor docs/probes/split_floor.cu && ./split_floor
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "graph_timing.h"

namespace cg = cooperative_groups;

constexpr int kBlocks = 8;
constexpr int kReplays = 200;  // graph replays per median

template <int kBarriers, bool kCluster>
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
  p.x ^= d.x, p.y ^= d.y, p.z ^= d.z, p.w ^= d.w;
  s.prefix[e] = p;
#pragma unroll
  for (int k = 0; k < kBlocks; ++k) p.x ^= b[k].x, p.y ^= b[k].y, p.z ^= b[k].z, p.w ^= b[k].w;
#pragma unroll
  for (int k = 0; k < kBarriers; ++k) {
    if constexpr (kCluster)
      cg::this_cluster().sync();
    else
      __syncthreads();
  }
  s.output[e] = p;
}

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (const int tokens : {1, 64, 128, 320}) {
    const std::vector<RowSet> rows = make_row_sets(tokens, kBlocks, 1, 256);
    const int sets = int(rows.size());
    // 10 rows read and 2 written per token.
    const double copy = same_bytes_copy_us(stream, kReplays, double(tokens) * kVectors * sizeof(uint4) * 12, sets);
    std::printf("T=%d: same-bytes copy %.2f us\n", tokens, copy);
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
        double us[3];
        if (cluster > 1) {
          us[0] = time(split_shape<0, true>);
          us[1] = time(split_shape<1, true>);
          us[2] = time(split_shape<2, true>);
        } else {
          us[0] = time(split_shape<0, false>);
          us[1] = time(split_shape<1, false>);
          us[2] = time(split_shape<2, false>);
        }
        std::printf("T=%d cluster=%d pdl=%d: loads->stores %.2f | +1 barrier %.2f | +2 barriers %.2f us\n", tokens, cluster,
                    int(pdl), us[0], us[1], us[2]);
      }
    free_row_sets(rows);
  }
}
