#include "app/bench/timing.h"

#include <algorithm>

#include "kernels/common/device_buffer.h"

namespace attnres {

Events::Events() {
  ATTNRES_CUDA_CHECK(cudaEventCreate(&start_));
  ATTNRES_CUDA_CHECK(cudaEventCreate(&stop_));
}

Events::~Events() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

Stream::Stream() { ATTNRES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() { cudaStreamDestroy(stream_); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double copy_bandwidth(Events& events) {
  const std::size_t bytes = std::size_t(2) << 30;
  DeviceBuffer<unsigned char> a(bytes), b(bytes);
  ATTNRES_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t = events.time_ms(
        nullptr, [&] { ATTNRES_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); });
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * double(bytes) / (median(ms) * 1e-3);
}

double time_graph_replays(int repeats, cudaStream_t stream, const std::function<void(int, cudaStream_t)>& enqueue) {
  for (int i = 0; i < 3; ++i) enqueue(i, stream);
  ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  ATTNRES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < kLaunchesPerGraph; ++i) enqueue(i, stream);
  } catch (...) {
    // Leave the stream out of capture mode, whatever the launch left behind.
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  ATTNRES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  ATTNRES_CUDA_CHECK(instantiated);
  double ms = 0;
  try {
    ms = time_replays(repeats, kLaunchesPerGraph, stream,
                      [exec](cudaStream_t s) { ATTNRES_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return ms;
}

double time_replays(int repeats, int launches, cudaStream_t stream, const std::function<void(cudaStream_t)>& replay) {
  // Longer than a Python call takes to start a torch graph's replay.
  constexpr unsigned kHoldMicroseconds = 500;
  Events events;
  std::vector<double> ms;
  replay(stream);  // warm-up
  for (int i = 0, replays = std::max(5, repeats / launches); i < replays; ++i) {
    hold_stream(stream, kHoldMicroseconds);
    ms.push_back(events.time_ms(stream, [&] { replay(stream); }) / launches);
  }
  return median(ms);
}

double time_copy_of_the_same_bytes(double bytes, int buffer_pairs, int repeats, cudaStream_t stream) {
  const std::size_t half = std::size_t(bytes / 2) / 16 * 16;
  DeviceBuffer<unsigned char> source(half * std::size_t(buffer_pairs)), target(source.size());
  ATTNRES_CUDA_CHECK(cudaMemset(source.get(), 1, source.size()));
  return time_graph_replays(repeats, stream, [&](int i, cudaStream_t s) {
    const std::size_t offset = std::size_t(i % buffer_pairs) * half;
    ATTNRES_CUDA_CHECK(
        cudaMemcpyAsync(target.get() + offset, source.get() + offset, half, cudaMemcpyDeviceToDevice, s));
  });
}

}  // namespace attnres
