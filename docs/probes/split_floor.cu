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

namespace cg = cooperative_groups;

#define CHECK(call)                                                                             \
  do {                                                                                          \
    const cudaError_t status = (call);                                                          \
    if (status != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status));      \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

constexpr int kVectors = 896;  // 16-byte vectors in a row of H=7168 bf16
constexpr int kBlocks = 8;
constexpr int kLaunchesPerGraph = 20;

struct RowSet {
  uint4 *prefix, *delta, *blocks, *output;
};

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

template <typename Enqueue>
double median_us(cudaStream_t stream, Enqueue enqueue) {
  for (int i = 0; i < 3; ++i) enqueue(i, stream);
  CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunchesPerGraph; ++i) enqueue(i, stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaGraphLaunch(exec, stream));
  std::vector<double> us;
  for (int r = 0; r < 200; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0 / kLaunchesPerGraph);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (const int tokens : {1, 64, 128, 320}) {
    const std::size_t row = kVectors * sizeof(uint4);
    const double set_bytes = double(tokens) * row * (kBlocks + 3);
    const int sets = int(std::min(256.0, 4 * 50e6 / set_bytes + 1));  // together > 4x the 50 MB L2
    std::vector<RowSet> rows(sets);
    for (RowSet& s : rows) {
      CHECK(cudaMalloc(&s.prefix, tokens * row));
      CHECK(cudaMalloc(&s.delta, tokens * row));
      CHECK(cudaMalloc(&s.blocks, tokens * row * kBlocks));
      CHECK(cudaMalloc(&s.output, tokens * row));
      CHECK(cudaMemset(s.prefix, 1, tokens * row));
      CHECK(cudaMemset(s.delta, 2, tokens * row));
      CHECK(cudaMemset(s.blocks, 3, tokens * row * kBlocks));
    }
    // The same bytes as a copy: 10 rows read and 2 written per token, half read and half written.
    const std::size_t half = std::size_t(double(tokens) * row * 12 / 2) / 16 * 16;
    unsigned char *source, *target;
    CHECK(cudaMalloc(&source, half * sets));
    CHECK(cudaMalloc(&target, half * sets));
    const double copy = median_us(stream, [&](int i, cudaStream_t s) {
      CHECK(cudaMemcpyAsync(target + (i % sets) * half, source + (i % sets) * half, half, cudaMemcpyDeviceToDevice, s));
    });
    std::printf("T=%d: same-bytes copy %.2f us\n", tokens, copy);
    for (const int cluster : {1, 2, 4, 8})
      for (const bool pdl : {false, true}) {
        const auto time = [&](auto kernel) {
          return median_us(stream, [&](int i, cudaStream_t s) {
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
    for (RowSet& s : rows) {
      CHECK(cudaFree(s.prefix));
      CHECK(cudaFree(s.delta));
      CHECK(cudaFree(s.blocks));
      CHECK(cudaFree(s.output));
    }
    CHECK(cudaFree(source));
    CHECK(cudaFree(target));
  }
}
