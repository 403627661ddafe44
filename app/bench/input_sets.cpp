#include "app/bench/input_sets.h"

#include <algorithm>

#include <fmt/format.h>

#include "app/bench/timing.h"
#include "app/casefile/case_spec.h"
#include "app/engine/checks.h"
#include "app/engine/device_checks.h"
#include "kernels/common/device_generator.h"

namespace attnres {

AttnResArgs InputSets::args(int set) const {
  const std::int64_t th = shape.tokens * shape.hidden;
  bf16_bits* base = storage.get() + std::int64_t(set) * set_elements;
  AttnResArgs a;
  a.shape = shape;
  a.strides = {shape.hidden, shape.hidden, shape.hidden, std::int64_t(shape.max_blocks) * shape.hidden, shape.hidden};
  a.prefix = base;
  a.delta = base + th;
  a.blocks = base + 2 * th;
  a.output = base + 2 * th + th * shape.max_blocks;
  a.norm_weight = weights.get();
  a.qk_weight = weights.get() + shape.hidden;
  a.output_norm_weight = weights.get() + 2 * shape.hidden;
  return a;
}

InputSets make_sets(const AttnResShape& shape, std::size_t l2_bytes) {
  InputSets sets;
  sets.shape = shape;
  const std::int64_t th = shape.tokens * shape.hidden;
  sets.set_elements = th * (3 + shape.max_blocks);
  const double set_bytes = double(sets.set_elements) * sizeof(bf16_bits);
  sets.count = int(std::clamp(4.0 * double(l2_bytes) / set_bytes + 1.0, 1.0, 256.0));
  sets.storage = DeviceBuffer<bf16_bits>(std::size_t(sets.set_elements) * sets.count);
  sets.weights = DeviceBuffer<bf16_bits>(std::size_t(3 * shape.hidden));
  CaseSpec spec = default_case("bench", shape.tokens, shape.hidden, shape.max_blocks, shape.num_blocks);
  const AttnResArgs a = sets.args(0);
  auto fill = [&](bf16_bits* data, std::int64_t rows, InputTensor which) {
    generate_on_device(data, StridedLayout::matrix(rows, shape.hidden, shape.hidden),
                       make_generator_key(spec.seed, to_string(which)),
                       resolve(spec.distributions[int(which)], spec.shape), nullptr);
  };
  fill(const_cast<bf16_bits*>(a.norm_weight), 1, InputTensor::norm_weight);
  fill(const_cast<bf16_bits*>(a.qk_weight), 1, InputTensor::qk_weight);
  fill(const_cast<bf16_bits*>(a.output_norm_weight), 1, InputTensor::output_norm_weight);
  fill(a.prefix, shape.tokens, InputTensor::prefix);
  fill(const_cast<bf16_bits*>(a.delta), shape.tokens, InputTensor::delta);
  fill(a.blocks, shape.tokens * shape.max_blocks, InputTensor::blocks);
  for (int s = 1; s < sets.count; ++s)
    ATTNRES_CUDA_CHECK(cudaMemcpyAsync(sets.storage.get() + s * sets.set_elements, sets.storage.get(),
                                       std::size_t(sets.set_elements) * sizeof(bf16_bits), cudaMemcpyDeviceToDevice));
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  return sets;
}

std::string check_kernel(InputSets& sets, const DeviceBuffer<double>& reference, const std::vector<bf16_bits>& pristine,
                         const Launcher& launch) {
  const AttnResArgs a = sets.args(0);
  const std::int64_t tokens = sets.shape.tokens, hidden = sets.shape.hidden;
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(a.prefix, pristine.data(), pristine.size() * sizeof(bf16_bits), cudaMemcpyHostToDevice));
  ATTNRES_CUDA_CHECK(cudaMemset(a.output, 0xff, std::size_t(tokens * hidden) * sizeof(bf16_bits)));  // NaN poison
  launch(a, nullptr);
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  const DeviceTensorView output{a.output, StridedLayout::matrix(tokens, hidden, hidden), 0};
  const Comparison c = comparison_from(compare_output_on_device(output, reference.get(), 8e-2, 3e-2, nullptr), tokens,
                                       hidden, 8e-2, 3e-2);
  // Later timed launches keep updating prefix in place; restore it for the next check.
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(a.prefix, pristine.data(), pristine.size() * sizeof(bf16_bits), cudaMemcpyHostToDevice));
  if (!c.within_tolerance()) return fmt::format("INCORRECT: max-abs {:.4g}; {}", c.max_abs_error, c.mismatch_summary());
  return fmt::format("ok (max-abs {:.3g})", c.max_abs_error);
}

double time_kernel(InputSets& sets, int repeats, cudaStream_t stream, const Launcher& launch) {
  return time_graph_replays(repeats, stream, [&](int i, cudaStream_t s) { launch(sets.args(i % sets.count), s); });
}

double time_kernel_with_events(InputSets& sets, int repeats, const Launcher& launch) {
  for (int i = 0; i < 3; ++i) launch(sets.args(i % sets.count), nullptr);
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  Events events;
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i)
    ms.push_back(events.time_ms(nullptr, [&] { launch(sets.args(i % sets.count), nullptr); }));
  return median(ms);
}

}  // namespace attnres
