#include "app/bench/timing.h"

namespace attnres {

namespace {

__global__ void sleep_for(unsigned microseconds) {
  for (unsigned slept = 0; slept < microseconds; slept += 100) __nanosleep(100000);
}

}  // namespace

void hold_stream(cudaStream_t stream, unsigned microseconds) {
  sleep_for<<<1, 1, 0, stream>>>(microseconds);
  ATTNRES_CUDA_CHECK(cudaGetLastError());
}

}  // namespace attnres
