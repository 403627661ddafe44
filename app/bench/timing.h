// How bench times: CUDA events, a stream of its own, graph replays of a batch of launches (host
// overhead left out), and the copies that give the bandwidth floor.
#pragma once
#include <functional>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/common/cuda_check.h"

namespace attnres {

class Events {
 public:
  Events();
  ~Events();
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  // Milliseconds between events recorded on `stream` before and after `launch`.
  template <class F>
  double time_ms(cudaStream_t stream, F&& launch) {
    ATTNRES_CUDA_CHECK(cudaEventRecord(start_, stream));
    launch();
    ATTNRES_CUDA_CHECK(cudaEventRecord(stop_, stream));
    ATTNRES_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    ATTNRES_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_{};
};

double median(std::vector<double> values);

// Bytes read plus written per second by a device-to-device copy of 2 GiB, median of 20.
double copy_bandwidth(Events& events);

// Puts a kernel on `stream` that sleeps about `microseconds` (as nvbench's blocking kernel): what
// the host queues behind it meanwhile then runs back to back, without the host's pace in it.
void hold_stream(cudaStream_t stream, unsigned microseconds);

// Median milliseconds of one launch where `replay` puts `launches` of them on `stream` (a graph):
// each replay queued behind hold_stream and timed with events around it, so that the host's cost
// of starting it (a cudaGraphLaunch, or a Python call) stays out of the number.
double time_replays(int repeats, int launches, cudaStream_t stream, const std::function<void(cudaStream_t)>& replay);

// Median milliseconds of one launch: `enqueue(i, stream)` puts the i-th launch on the stream;
// kLaunchesPerGraph of them are captured into a CUDA graph, which is replayed, so host launch
// overhead stays out of the numbers even where one launch takes a few microseconds.
inline constexpr int kLaunchesPerGraph = 20;
double time_graph_replays(int repeats, cudaStream_t stream, const std::function<void(int, cudaStream_t)>& enqueue);

// The floor for a point's bytes at its size: a device-to-device copy reading half of them and
// writing the other half, timed as the kernels are (graph replays, rotating over `buffer_pairs`
// buffer pairs, so neither is served from L2).
double time_copy_of_the_same_bytes(double bytes, int buffer_pairs, int repeats, cudaStream_t stream);

}  // namespace attnres
