// What the probes beside this file share: a checking macro, the input sets of a launch at H=7168,
// and `bench`'s way of timing a kernel (CUDA-graph replays of 20 launches on rotating input sets,
// median per launch over `replays`).
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    const cudaError_t status = (call);                                                     \
    if (status != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kLaunchesPerGraph = 20;

// `enqueue(i, stream)` enqueues launch i (on input set i modulo the sets).
template <typename Enqueue>
double median_us(cudaStream_t stream, int replays, Enqueue enqueue) {
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
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0 / kLaunchesPerGraph);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

constexpr int kVectors = 896;  // 16-byte vectors in a row of H=7168 bf16

// One launch's tensors: prefix, delta and output rows, `blocks` block rows per token.
struct RowSet {
  uint4 *prefix, *delta, *blocks, *output;
};

// Enough sets to be more than 4x the 50 MB L2 together, within [min_sets, max_sets].
inline std::vector<RowSet> make_row_sets(long tokens, int blocks, int min_sets, int max_sets) {
  const std::size_t row = kVectors * sizeof(uint4);
  const double set_bytes = double(tokens) * row * (blocks + 3);
  std::vector<RowSet> sets(int(std::clamp(4 * 50e6 / set_bytes + 1, double(min_sets), double(max_sets))));
  for (RowSet& s : sets) {
    CHECK(cudaMalloc(&s.prefix, tokens * row));
    CHECK(cudaMalloc(&s.delta, tokens * row));
    CHECK(cudaMalloc(&s.blocks, tokens * row * blocks));
    CHECK(cudaMalloc(&s.output, tokens * row));
    CHECK(cudaMemset(s.prefix, 1, tokens * row));
    CHECK(cudaMemset(s.delta, 2, tokens * row));
    CHECK(cudaMemset(s.blocks, 3, tokens * row * blocks));
  }
  return sets;
}

inline void free_row_sets(const std::vector<RowSet>& sets) {
  for (const RowSet& s : sets) {
    CHECK(cudaFree(s.prefix));
    CHECK(cudaFree(s.delta));
    CHECK(cudaFree(s.blocks));
    CHECK(cudaFree(s.output));
  }
}

// A device-to-device copy reading half of `bytes` and writing the other half, on `sets` rotating
// buffers, timed as a kernel is: the floor for those bytes at that size.
inline double same_bytes_copy_us(cudaStream_t stream, int replays, double bytes, int sets) {
  const std::size_t half = std::size_t(bytes / 2) / 16 * 16;
  unsigned char *source, *target;
  CHECK(cudaMalloc(&source, half * sets));
  CHECK(cudaMalloc(&target, half * sets));
  const double us = median_us(stream, replays, [&](int i, cudaStream_t s) {
    CHECK(cudaMemcpyAsync(target + (i % sets) * half, source + (i % sets) * half, half, cudaMemcpyDeviceToDevice, s));
  });
  CHECK(cudaFree(source));
  CHECK(cudaFree(target));
  return us;
}
