// The checks after a run as device reductions over tensors that stay on the device: each pass
// returns a small tally (app/engine/check_tally.h), never the tensors. Also the device-side making of a
// case's tensors: canaries, poison, and the inputs' checksums.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "app/engine/check_tally.h"
#include "kernels/common/philox.h"
#include "kernels/common/strided_layout.h"

namespace attnres {

// A tensor on the device: `base` is the start of its storage (layout.span() elements), with
// `guard` elements of guard region before and after it.
struct DeviceTensorView {
  bf16_bits* base = nullptr;
  StridedLayout layout;
  std::int64_t guard = 0;

  ATTNRES_HD bf16_bits* data() const { return base + layout.offset; }
  ATTNRES_HD bf16_bits& at(std::int64_t row, std::int64_t col) const { return data()[layout.row_start(row) + col]; }
};

// Where an input's original values come from: a device copy laid out as the tensor (guards and
// padding included), or, without one, the generator over the logical elements and canaries
// elsewhere.
struct PristineValues {
  const bf16_bits* copy = nullptr;  // the start of its storage
  GeneratorKey key{};
  ResolvedDistribution dist{};
};

// What p is made of: the original prefix and delta, for the rows that must hold p.
struct ResidualSources {
  PristineValues prefix, delta;
  StridedLayout prefix_layout, delta_layout;
  std::int64_t hidden = 0;
  bool has_delta = false;
  int max_blocks = 0, block_write_idx = -1;
};

void fill_on_device(bf16_bits* data, std::int64_t count, bf16_bits value, cudaStream_t stream);

// One thread that sleeps about `microseconds` on `stream`: what comes after it there waits.
void delay_on_device(int microseconds, cudaStream_t stream);

// Buffers a producer kernel copies: to[t][0..elements[t]) = from[t][...], for t < count.
struct LateCopies {
  static constexpr int kMaxTensors = 8;
  const bf16_bits* from[kMaxTensors] = {};
  bf16_bits* to[kMaxTensors] = {};
  std::int64_t elements[kMaxTensors] = {};
  int count = 0;
};
// A producer on `stream` that lets its dependents launch at once (griddepcontrol.launch_dependents
// on sm_90 and later), sleeps about `microseconds`, then makes the copies.
void trigger_then_copy_late_on_device(const LateCopies& copies, int microseconds, cudaStream_t stream);
// The logical elements of a strided tensor.
void fill_rows_on_device(const DeviceTensorView& tensor, bf16_bits value, cudaStream_t stream);

// The logical elements: element i (t * columns + h) values[i % 2].
void fill_alternating_rows_on_device(const DeviceTensorView& tensor, const bf16_bits (&values)[2], cudaStream_t stream);

// The logical elements of two tensors of one layout whose bits differ.
OutputDifference output_bits_difference_on_device(const DeviceTensorView& now, const DeviceTensorView& before,
                                                  cudaStream_t stream);

// The sum behind checksum_text over the logical elements.
std::uint64_t checksum_on_device(const DeviceTensorView& tensor, cudaStream_t stream);

// The probe call's canaries: every guard and padding element of the tensor set to
// patterned_canary(seed, tensor, offset); and those that no longer hold it afterwards.
void fill_patterned_canaries_on_device(const DeviceTensorView& tensor, std::uint64_t seed, int tensor_index,
                                       cudaStream_t stream);
TensorTally check_patterned_canaries_on_device(const DeviceTensorView& tensor, std::uint64_t seed, int tensor_index,
                                               cudaStream_t stream);

// Every element of the allocation (guards, padding, logical) against what it must hold.
TensorTally check_tensor_on_device(const DeviceTensorView& tensor, TensorRole role, const PristineValues& pristine,
                                   const ResidualSources& residual, cudaStream_t stream);

// The [rows, columns] output against the dense float64 reference.
OutputTally compare_output_on_device(const DeviceTensorView& output, const double* reference, double atol, double rtol,
                                     cudaStream_t stream);

// The pooled |out - ref| of ErrorMap (app/engine/checks.h): `max_error` and `mismatched` hold rows *
// columns cells; element (t, h) lies in cell (t * rows / T, h * columns / H).
void error_map_on_device(const DeviceTensorView& output, const double* reference, double atol, double rtol,
                         std::int64_t rows, std::int64_t columns, double* max_error, std::int64_t* mismatched,
                         cudaStream_t stream);

// Index of the first value that is not finite, or -1.
std::int64_t first_non_finite_on_device(const double* values, std::int64_t count, cudaStream_t stream);

}  // namespace attnres
