// The tensors bench times kernels on: as many copies of one point's inputs as keep the launches
// out of L2 (together more than 4x its size), launched on in turn, and the check of a kernel
// against the float64 reference on the first copy before it is timed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/common/bf16.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/problem.h"

namespace attnres {

using Launcher = std::function<void(const AttnResArgs&, cudaStream_t)>;

// Sets of per-call tensors (prefix, delta, blocks, output) inside one allocation, sharing weights.
struct InputSets {
  DeviceBuffer<bf16_bits> storage;
  DeviceBuffer<bf16_bits> weights;  // norm_weight, qk_weight, output_norm_weight
  std::int64_t set_elements = 0;
  int count = 0;
  AttnResShape shape;

  AttnResArgs args(int set) const;
};

// Dense sets of `shape`'s inputs, generated once and copied: more than 4x `l2_bytes` in all.
InputSets make_sets(const AttnResShape& shape, std::size_t l2_bytes);

// Runs `launch` once on set 0 (prefix restored from `pristine`, the output poisoned) and judges it
// against `reference`: "ok (max-abs ...)" or "INCORRECT: ...". Set 0's prefix is restored after.
std::string check_kernel(InputSets& sets, const DeviceBuffer<double>& reference, const std::vector<bf16_bits>& pristine,
                         const Launcher& launch);

// Median milliseconds of one launch by graph replays (timing.h), rotating over the sets.
double time_kernel(InputSets& sets, int repeats, cudaStream_t stream, const Launcher& launch);

// Median milliseconds of one launch with CUDA events around each launch on the default stream: for
// kernels that cannot be captured into a graph (host overhead included).
double time_kernel_with_events(InputSets& sets, int repeats, const Launcher& launch);

}  // namespace attnres
