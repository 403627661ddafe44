#include "app/engine/device_checks.h"

#include <algorithm>
#include <cstring>

#include "app/casefile/input_checksum.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/problem.h"

namespace attnres {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::int64_t count) {
  return unsigned(std::max<std::int64_t>(1, std::min<std::int64_t>((count + kThreads - 1) / kThreads, 4096)));
}

// Grid-stride loops: every thread of a launch reaches the warp reductions below.
#define ATTNRES_GRID_STRIDE(i, count)                                                     \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (count); \
       i += std::int64_t(gridDim.x) * blockDim.x)

__device__ unsigned long long warp_sum(unsigned long long value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

__device__ long long warp_min(long long value) {
  for (int offset = 16; offset > 0; offset >>= 1) value = min(value, __shfl_down_sync(0xffffffffu, value, offset));
  return value;
}

__device__ unsigned long long warp_max(unsigned long long value) {
  for (int offset = 16; offset > 0; offset >>= 1) value = max(value, __shfl_down_sync(0xffffffffu, value, offset));
  return value;
}

// One atomic per warp: tallies of violations can run into the millions.
__device__ void add_to(unsigned long long* total, unsigned long long value) {
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0 && value) atomicAdd(total, value);
}

__device__ void min_to(long long* total, long long value) {
  value = warp_min(value);
  if (threadIdx.x % 32 == 0 && value != kNoOffset) atomicMin(total, value);
}

__device__ void max_to(unsigned long long* total, unsigned long long value) {
  value = warp_max(value);
  if (threadIdx.x % 32 == 0 && value) atomicMax(total, value);
}

// Non-negative doubles order as their bit patterns.
__device__ unsigned long long order_bits(double value) { return (unsigned long long)(__double_as_longlong(value)); }

// Copies a device accumulator's initial value in, and its final value back.
template <class T>
class Accumulator {
 public:
  Accumulator(const T& initial, cudaStream_t stream) : buffer_(1), stream_(stream) {
    ATTNRES_CUDA_CHECK(cudaMemcpyAsync(buffer_.get(), &initial, sizeof(T), cudaMemcpyHostToDevice, stream));
  }
  T* get() const { return buffer_.get(); }
  T result() const {
    T value;
    ATTNRES_CUDA_CHECK(cudaMemcpyAsync(&value, buffer_.get(), sizeof(T), cudaMemcpyDeviceToHost, stream_));
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return value;
  }

 private:
  DeviceBuffer<T> buffer_;
  cudaStream_t stream_;
};

template <class T>
T read_element(const T* address, cudaStream_t stream) {
  T value;
  ATTNRES_CUDA_CHECK(cudaMemcpyAsync(&value, address, sizeof(T), cudaMemcpyDeviceToHost, stream));
  ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
  return value;
}

__global__ void fill_kernel(bf16_bits* data, std::int64_t count, bf16_bits value) {
  ATTNRES_GRID_STRIDE(i, count) data[i] = value;
}

__global__ void fill_rows_kernel(DeviceTensorView t, bf16_bits value) {
  const std::int64_t columns = t.layout.columns;
  ATTNRES_GRID_STRIDE(i, t.layout.rows() * columns) t.at(i / columns, i % columns) = value;
}

__global__ void fill_alternating_rows_kernel(DeviceTensorView t, bf16_bits even, bf16_bits odd) {
  const std::int64_t columns = t.layout.columns;
  ATTNRES_GRID_STRIDE(i, t.layout.rows() * columns) t.at(i / columns, i % columns) = i % 2 ? odd : even;
}

struct DifferenceTotals {
  unsigned long long count;
  long long first;
};

__global__ void difference_kernel(DeviceTensorView now, DeviceTensorView before, DifferenceTotals* totals) {
  unsigned long long count = 0;
  long long first = kNoOffset;
  const std::int64_t columns = now.layout.columns;
  ATTNRES_GRID_STRIDE(i, now.layout.rows() * columns) {
    if (now.at(i / columns, i % columns) == before.at(i / columns, i % columns)) continue;
    ++count;
    first = min(first, (long long)i);
  }
  add_to(&totals->count, count);
  min_to(&totals->first, first);
}

__global__ void checksum_kernel(DeviceTensorView t, unsigned long long* sum) {
  unsigned long long partial = 0;
  const std::int64_t columns = t.layout.columns;
  ATTNRES_GRID_STRIDE(i, t.layout.rows() * columns) {
    partial += checksum_term(std::uint64_t(i), t.at(i / columns, i % columns));
  }
  add_to(sum, partial);
}

__device__ bf16_bits pristine_at(const PristineValues& p, std::int64_t offset, std::int64_t index, bool logical) {
  if (p.copy) return p.copy[offset];
  if (!logical) return kCanaryBits;
  return generate_bf16(p.key, p.dist, std::uint64_t(index));
}

__device__ bf16_bits residual_at(const ResidualSources& r, std::int64_t t, std::int64_t h) {
  const std::int64_t index = t * r.hidden + h;
  const bf16_bits prefix =
      pristine_at(r.prefix, r.prefix_layout.offset + r.prefix_layout.row_start(t) + h, index, true);
  const bf16_bits delta =
      r.has_delta ? pristine_at(r.delta, r.delta_layout.offset + r.delta_layout.row_start(t) + h, index, true)
                  : bf16_bits(0);
  return residual_sum(prefix, delta, r.has_delta);
}

// What the storage element at `offset` must hold after a correct run, whether it is logical,
// and whether its row must hold p.
__device__ bf16_bits wanted_at(const DeviceTensorView& t, TensorRole role, const PristineValues& pristine,
                               const ResidualSources& r, std::int64_t offset, bool& logical, bool& state_row) {
  logical = state_row = false;
  if (offset < 0 || offset >= t.layout.span()) return pristine_at(pristine, offset, 0, false);
  const StridedLayout::Location at = t.layout.locate(offset);
  state_row = at.row >= 0 && (role == TensorRole::state || (role == TensorRole::blocks && r.max_blocks > 0 &&
                                                            at.row % r.max_blocks == r.block_write_idx));
  logical = at.logical;
  if (!logical) return pristine_at(pristine, offset, 0, false);
  if (role == TensorRole::output || role == TensorRole::untouched_output) return kPoisonBits;
  if (state_row) return residual_at(r, role == TensorRole::state ? at.row : at.row / r.max_blocks, at.col);
  return pristine_at(pristine, offset, at.row * t.layout.columns + at.col, true);
}

struct CheckTotals {
  unsigned long long count[kDamageKinds];
  long long first[kDamageKinds];
};

// One thread's damage, added into the totals once at its end.
struct ThreadTally {
  unsigned long long count[kDamageKinds] = {};
  long long first[kDamageKinds];
  __device__ ThreadTally() {
    for (int k = 0; k < kDamageKinds; ++k) first[k] = kNoOffset;
  }
  __device__ void add(int kind, std::int64_t offset) {
    if (kind < 0) return;
    ++count[kind];
    first[kind] = min(first[kind], (long long)offset);
  }
  __device__ void flush(CheckTotals* totals) const {
    for (int k = 0; k < kDamageKinds; ++k) {
      add_to(&totals->count[k], count[k]);
      min_to(&totals->first[k], first[k]);
    }
  }
};

__global__ void check_kernel(DeviceTensorView t, TensorRole role, PristineValues pristine, ResidualSources r,
                             CheckTotals* totals) {
  ThreadTally tally;
  const std::int64_t span = t.layout.span();
  ATTNRES_GRID_STRIDE(i, span + 2 * t.guard) {
    const std::int64_t offset = i - t.guard;
    bool logical = false, state_row = false;
    const bf16_bits want = wanted_at(t, role, pristine, r, offset, logical, state_row);
    tally.add(damage_at(offset, span, logical, role == TensorRole::output, state_row, t.base[offset], want), offset);
  }
  tally.flush(totals);
}

// Logical elements keep what they hold.
__global__ void fill_patterned_canaries_kernel(DeviceTensorView t, std::uint64_t seed, int tensor) {
  const std::int64_t span = t.layout.span();
  ATTNRES_GRID_STRIDE(i, span + 2 * t.guard) {
    const std::int64_t offset = i - t.guard;
    if (offset >= 0 && offset < span && t.layout.locate(offset).logical) continue;
    t.base[offset] = patterned_canary(seed, tensor, offset);
  }
}

__global__ void check_patterned_canaries_kernel(DeviceTensorView t, std::uint64_t seed, int tensor,
                                                CheckTotals* totals) {
  ThreadTally tally;
  const std::int64_t span = t.layout.span();
  ATTNRES_GRID_STRIDE(i, span + 2 * t.guard) {
    const std::int64_t offset = i - t.guard;
    if (offset >= 0 && offset < span && t.layout.locate(offset).logical) continue;
    tally.add(damage_at(offset, span, false, false, false, t.base[offset], patterned_canary(seed, tensor, offset)),
              offset);
  }
  tally.flush(totals);
}

__global__ void state_probe_kernel(DeviceTensorView t, TensorRole role, PristineValues pristine, ResidualSources r,
                                   std::int64_t offset, bf16_bits* got_want) {
  bool logical = false, state_row = false;
  got_want[0] = t.base[offset];
  got_want[1] = wanted_at(t, role, pristine, r, offset, logical, state_row);
}

struct CompareTotals {
  unsigned long long mismatched, nan_count, inf_count, max_abs_bits, max_rel_bits;
  long long worst_index;
  double signed_error_sum, spacing_sum;
  unsigned long long finite_pairs;
};

// The block's sum of `value`, in thread 0: shuffles within each warp, then the warps' sums in
// order. Floating-point sums by atomics differ in their last bits from run to run; these give the
// same bits for the same grid, so a report does not depend on the run (or the worker) that made it.
__device__ double block_sum_in_order(double value) {
  __shared__ double warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0)
    for (int warp = 0; warp < kThreads / 32; ++warp) total += warp_sums[warp];
  __syncthreads();  // warp_sums is read before a next call writes it
  return total;
}

// `block_sums` holds each block's (signed error, spacing) sums, added in block order by
// sum_blocks_in_order_kernel.
__global__ void compare_kernel(DeviceTensorView out, const double* reference, double atol, double rtol,
                               CompareTotals* totals, double* block_sums) {
  unsigned long long mismatched = 0, nans = 0, infs = 0, max_abs = 0, max_rel = 0, finite_pairs = 0;
  double signed_errors = 0, spacings = 0;
  const std::int64_t columns = out.layout.columns;
  ATTNRES_GRID_STRIDE(i, out.layout.rows() * columns) {
    const double got = bf16_to_float(out.at(i / columns, i % columns));
    const double want = reference[i];
    if (got != got)
      ++nans;
    else if (!is_finite_value(got))
      ++infs;
    const double difference = output_difference(got, want);
    if (output_mismatch(got, want, difference, atol, rtol)) ++mismatched;
    max_abs = max(max_abs, order_bits(difference));
    if (is_finite_value(difference) && want != 0.0) max_rel = max(max_rel, order_bits(difference / fabs(want)));
    if (is_finite_value(got) && is_finite_value(want)) {
      signed_errors += got - want;
      spacings += bf16_spacing(want);
      ++finite_pairs;
    }
  }
  const double block_signed_errors = block_sum_in_order(signed_errors);
  const double block_spacings = block_sum_in_order(spacings);
  if (threadIdx.x == 0) {
    block_sums[2 * blockIdx.x] = block_signed_errors;
    block_sums[2 * blockIdx.x + 1] = block_spacings;
  }
  add_to(&totals->finite_pairs, finite_pairs);
  add_to(&totals->mismatched, mismatched);
  add_to(&totals->nan_count, nans);
  add_to(&totals->inf_count, infs);
  max_to(&totals->max_abs_bits, max_abs);
  max_to(&totals->max_rel_bits, max_rel);
}

__global__ void sum_blocks_in_order_kernel(const double* block_sums, unsigned blocks, CompareTotals* totals) {
  double signed_errors = 0, spacings = 0;
  for (unsigned block = 0; block < blocks; ++block) {
    signed_errors += block_sums[2 * block];
    spacings += block_sums[2 * block + 1];
  }
  totals->signed_error_sum = signed_errors;
  totals->spacing_sum = spacings;
}

// The first element whose difference is the largest: the one a pass over the rows reports.
__global__ void worst_index_kernel(DeviceTensorView out, const double* reference, CompareTotals* totals) {
  const double largest = __longlong_as_double((long long)totals->max_abs_bits);
  long long first = kNoOffset;
  const std::int64_t columns = out.layout.columns;
  ATTNRES_GRID_STRIDE(i, out.layout.rows() * columns) {
    const double got = bf16_to_float(out.at(i / columns, i % columns));
    if (output_difference(got, reference[i]) == largest) first = min(first, (long long)i);
  }
  min_to(&totals->worst_index, first);
}

constexpr int kCellThreads = 128;

// One block per cell: the largest difference and the mismatches among the cell's elements.
__global__ void error_map_kernel(DeviceTensorView out, const double* reference, double atol, double rtol,
                                 std::int64_t rows, std::int64_t columns, double* max_error,
                                 unsigned long long* mismatched) {
  const std::int64_t cell_row = blockIdx.x / columns, cell_column = blockIdx.x % columns;
  // Cell r holds the t with floor(t * rows / T) == r: t in [ceil(r * T / rows), ceil((r + 1) * T / rows)).
  const std::int64_t tokens = out.layout.rows(), hidden = out.layout.columns;
  const std::int64_t t_begin = (cell_row * tokens + rows - 1) / rows,
                     t_end = ((cell_row + 1) * tokens + rows - 1) / rows;
  const std::int64_t h_begin = (cell_column * hidden + columns - 1) / columns;
  const std::int64_t h_end = ((cell_column + 1) * hidden + columns - 1) / columns;
  const std::int64_t width = h_end - h_begin;
  double largest = 0;
  unsigned long long count = 0;
  for (std::int64_t i = threadIdx.x; i < (t_end - t_begin) * width; i += blockDim.x) {
    const std::int64_t t = t_begin + i / width, h = h_begin + i % width;
    const double got = bf16_to_float(out.at(t, h)), want = reference[t * hidden + h];
    const double difference = output_difference(got, want);
    largest = fmax(largest, difference);
    count += output_mismatch(got, want, difference, atol, rtol);
  }
  __shared__ double largest_of[kCellThreads];
  __shared__ unsigned long long count_of[kCellThreads];
  largest_of[threadIdx.x] = largest;
  count_of[threadIdx.x] = count;
  __syncthreads();
  for (int half = kCellThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      largest_of[threadIdx.x] = fmax(largest_of[threadIdx.x], largest_of[threadIdx.x + half]);
      count_of[threadIdx.x] += count_of[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    max_error[blockIdx.x] = largest_of[0];
    mismatched[blockIdx.x] = count_of[0];
  }
}

__global__ void first_non_finite_kernel(const double* values, std::int64_t count, long long* first) {
  long long found = kNoOffset;
  ATTNRES_GRID_STRIDE(i, count) {
    if (!is_finite_value(values[i])) found = min(found, (long long)i);
  }
  min_to(first, found);
}

}  // namespace

namespace {

__global__ void delay_kernel(int microseconds) {
  for (int slept = 0; slept < microseconds; slept += 1000) __nanosleep(1000000);
}

// Lets its dependents launch at once, then sleeps and only then copies: on sm_90 a dependent
// launched with programmatic stream serialization runs beside it until griddepcontrol.wait.
__global__ void trigger_then_copy_late_kernel(LateCopies copies, int microseconds) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (threadIdx.x == 0)
    for (int slept = 0; slept < microseconds; slept += 1000) __nanosleep(1000000);
  __syncthreads();
  for (int t = 0; t < copies.count; ++t) ATTNRES_GRID_STRIDE(i, copies.elements[t]) copies.to[t][i] = copies.from[t][i];
}

}  // namespace

void delay_on_device(int microseconds, cudaStream_t stream) {
  delay_kernel<<<1, 1, 0, stream>>>(microseconds);
  ATTNRES_CHECK_LAUNCH("delay_kernel");
}

void trigger_then_copy_late_on_device(const LateCopies& copies, int microseconds, cudaStream_t stream) {
  int device = 0, multiprocessors = 0;
  ATTNRES_CUDA_CHECK(cudaGetDevice(&device));
  ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  // One block per multiprocessor, so every block has triggered before the dependent starts.
  trigger_then_copy_late_kernel<<<unsigned(multiprocessors), kThreads, 0, stream>>>(copies, microseconds);
  ATTNRES_CHECK_LAUNCH("trigger_then_copy_late_kernel");
}

void fill_on_device(bf16_bits* data, std::int64_t count, bf16_bits value, cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, count, value);
  ATTNRES_CHECK_LAUNCH("fill_kernel");
}

void fill_rows_on_device(const DeviceTensorView& tensor, bf16_bits value, cudaStream_t stream) {
  const std::int64_t elements = tensor.layout.rows() * tensor.layout.columns;
  if (elements == 0) return;
  fill_rows_kernel<<<grid_for(elements), kThreads, 0, stream>>>(tensor, value);
  ATTNRES_CHECK_LAUNCH("fill_rows_kernel");
}

void fill_alternating_rows_on_device(const DeviceTensorView& tensor, const bf16_bits (&values)[2],
                                     cudaStream_t stream) {
  const std::int64_t elements = tensor.layout.rows() * tensor.layout.columns;
  if (elements == 0) return;
  fill_alternating_rows_kernel<<<grid_for(elements), kThreads, 0, stream>>>(tensor, values[0], values[1]);
  ATTNRES_CHECK_LAUNCH("fill_alternating_rows_kernel");
}

OutputDifference output_bits_difference_on_device(const DeviceTensorView& now, const DeviceTensorView& before,
                                                  cudaStream_t stream) {
  OutputDifference d;
  const std::int64_t elements = now.layout.rows() * now.layout.columns;
  if (elements == 0) return d;
  Accumulator<DifferenceTotals> totals(DifferenceTotals{0, kNoOffset}, stream);
  difference_kernel<<<grid_for(elements), kThreads, 0, stream>>>(now, before, totals.get());
  ATTNRES_CHECK_LAUNCH("difference_kernel");
  const DifferenceTotals result = totals.result();
  d.count = std::int64_t(result.count);
  if (!d.count) return d;
  d.first_index = result.first;
  const std::int64_t t = d.first_index / now.layout.columns, h = d.first_index % now.layout.columns;
  d.first_now = read_element(&now.at(t, h), stream);
  d.first_before = read_element(&before.at(t, h), stream);
  return d;
}

std::uint64_t checksum_on_device(const DeviceTensorView& tensor, cudaStream_t stream) {
  Accumulator<unsigned long long> sum(0, stream);
  checksum_kernel<<<grid_for(tensor.layout.rows() * tensor.layout.columns), kThreads, 0, stream>>>(tensor, sum.get());
  ATTNRES_CHECK_LAUNCH("checksum_kernel");
  return sum.result();
}

namespace {

// The tally `launch` adds into zeroed totals.
template <class Launch>
TensorTally tally_on_device(cudaStream_t stream, Launch&& launch) {
  CheckTotals initial{};
  for (long long& first : initial.first) first = kNoOffset;
  Accumulator<CheckTotals> totals(initial, stream);
  launch(totals.get());
  const CheckTotals result = totals.result();
  TensorTally tally;
  for (int k = 0; k < kDamageKinds; ++k) {
    tally.count[k] = std::int64_t(result.count[k]);
    tally.first[k] = result.first[k];
  }
  return tally;
}

}  // namespace

void fill_patterned_canaries_on_device(const DeviceTensorView& tensor, std::uint64_t seed, int tensor_index,
                                       cudaStream_t stream) {
  const std::int64_t elements = tensor.layout.span() + 2 * tensor.guard;
  fill_patterned_canaries_kernel<<<grid_for(elements), kThreads, 0, stream>>>(tensor, seed, tensor_index);
  ATTNRES_CHECK_LAUNCH("fill_patterned_canaries_kernel");
}

TensorTally check_patterned_canaries_on_device(const DeviceTensorView& tensor, std::uint64_t seed, int tensor_index,
                                               cudaStream_t stream) {
  return tally_on_device(stream, [&](CheckTotals* totals) {
    check_patterned_canaries_kernel<<<grid_for(tensor.layout.span() + 2 * tensor.guard), kThreads, 0, stream>>>(
        tensor, seed, tensor_index, totals);
    ATTNRES_CHECK_LAUNCH("check_patterned_canaries_kernel");
  });
}

TensorTally check_tensor_on_device(const DeviceTensorView& tensor, TensorRole role, const PristineValues& pristine,
                                   const ResidualSources& residual, cudaStream_t stream) {
  TensorTally tally = tally_on_device(stream, [&](CheckTotals* totals) {
    check_kernel<<<grid_for(tensor.layout.span() + 2 * tensor.guard), kThreads, 0, stream>>>(tensor, role, pristine,
                                                                                             residual, totals);
    ATTNRES_CHECK_LAUNCH("check_kernel");
  });
  const std::int64_t state = tally.first[int(Damage::state_mismatch)];
  if (state != kNoOffset) {
    DeviceBuffer<bf16_bits> got_want(2);
    state_probe_kernel<<<1, 1, 0, stream>>>(tensor, role, pristine, residual, state, got_want.get());
    ATTNRES_CHECK_LAUNCH("state_probe_kernel");
    bf16_bits bits[2];
    ATTNRES_CUDA_CHECK(cudaMemcpyAsync(bits, got_want.get(), sizeof bits, cudaMemcpyDeviceToHost, stream));
    ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
    tally.state_got = bits[0];
    tally.state_want = bits[1];
  }
  return tally;
}

OutputTally compare_output_on_device(const DeviceTensorView& output, const double* reference, double atol, double rtol,
                                     cudaStream_t stream) {
  CompareTotals initial{};
  initial.worst_index = kNoOffset;
  Accumulator<CompareTotals> totals(initial, stream);
  const std::int64_t elements = output.layout.rows() * output.layout.columns;
  if (elements == 0) return OutputTally{};  // T = 0: nothing to compare
  const unsigned blocks = grid_for(elements);
  DeviceBuffer<double> block_sums(2 * std::size_t(blocks));
  compare_kernel<<<blocks, kThreads, 0, stream>>>(output, reference, atol, rtol, totals.get(), block_sums.get());
  ATTNRES_CHECK_LAUNCH("compare_kernel");
  sum_blocks_in_order_kernel<<<1, 1, 0, stream>>>(block_sums.get(), blocks, totals.get());
  ATTNRES_CHECK_LAUNCH("sum_blocks_in_order_kernel");
  worst_index_kernel<<<grid_for(elements), kThreads, 0, stream>>>(output, reference, totals.get());
  ATTNRES_CHECK_LAUNCH("worst_index_kernel");
  const CompareTotals result = totals.result();
  OutputTally tally;
  tally.mismatched = std::int64_t(result.mismatched);
  tally.nan_count = std::int64_t(result.nan_count);
  tally.inf_count = std::int64_t(result.inf_count);
  std::memcpy(&tally.max_abs_error, &result.max_abs_bits, sizeof(double));
  std::memcpy(&tally.max_rel_error, &result.max_rel_bits, sizeof(double));
  tally.worst_index = result.worst_index;
  tally.signed_error_sum = result.signed_error_sum;
  tally.spacing_sum = result.spacing_sum;
  tally.finite_pairs = std::int64_t(result.finite_pairs);
  const std::int64_t t = tally.worst_index / output.layout.columns, h = tally.worst_index % output.layout.columns;
  tally.worst_value = bf16_to_float(read_element(&output.at(t, h), stream));
  tally.worst_reference = read_element(reference + tally.worst_index, stream);
  return tally;
}

void error_map_on_device(const DeviceTensorView& output, const double* reference, double atol, double rtol,
                         std::int64_t rows, std::int64_t columns, double* max_error, std::int64_t* mismatched,
                         cudaStream_t stream) {
  const std::size_t cells = std::size_t(rows * columns);
  if (cells == 0) return;  // T = 0
  DeviceBuffer<double> largest(cells);
  DeviceBuffer<unsigned long long> counts(cells);
  error_map_kernel<<<unsigned(cells), kCellThreads, 0, stream>>>(output, reference, atol, rtol, rows, columns,
                                                                 largest.get(), counts.get());
  ATTNRES_CHECK_LAUNCH("error_map_kernel");
  ATTNRES_CUDA_CHECK(cudaMemcpyAsync(max_error, largest.get(), largest.bytes(), cudaMemcpyDeviceToHost, stream));
  static_assert(sizeof(std::int64_t) == sizeof(unsigned long long), "counts are copied as they are");
  ATTNRES_CUDA_CHECK(cudaMemcpyAsync(mismatched, counts.get(), counts.bytes(), cudaMemcpyDeviceToHost, stream));
  ATTNRES_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::int64_t first_non_finite_on_device(const double* values, std::int64_t count, cudaStream_t stream) {
  Accumulator<long long> first(kNoOffset, stream);
  first_non_finite_kernel<<<grid_for(count), kThreads, 0, stream>>>(values, count, first.get());
  ATTNRES_CHECK_LAUNCH("first_non_finite_kernel");
  const long long result = first.result();
  return result == kNoOffset ? -1 : std::int64_t(result);
}

}  // namespace attnres
