#include "app/casefile/host_tensors.h"

#include <algorithm>

#include <fmt/format.h>

#include "app/casefile/input_checksum.h"
#include "kernels/common/checked_size.h"
#include "kernels/common/host_generator.h"
#include "kernels/common/parallel.h"

namespace attnres {

HostTensor make_tensor(const TensorLayout& layout) {
  const std::optional<std::int64_t> span = checked_span(layout);
  const std::optional<std::int64_t> elements = span ? (CheckedSize(*span) + 2 * layout.guard()).get() : std::nullopt;
  if (!elements || std::uint64_t(*elements) > std::vector<bf16_bits>().max_size())
    throw std::length_error(fmt::format("{}: its layout does not fit in memory", layout.name));
  HostTensor t;
  static_cast<TensorLayout&>(t) = layout;
  t.storage.assign(std::size_t(*elements), kCanaryBits);
  return t;
}

std::vector<HostTensor*> CaseTensors::all() {
  return {&prefix, &delta, &blocks, &norm_weight, &qk_weight, &output_norm_weight, &output};
}

std::vector<const HostTensor*> CaseTensors::all() const {
  return {&prefix, &delta, &blocks, &norm_weight, &qk_weight, &output_norm_weight, &output};
}

AttnResArgs CaseTensors::layout() const {
  AttnResArgs a;
  a.shape = shape;
  a.strides = strides;
  return a;
}

AttnResArgs CaseTensors::args() {
  AttnResArgs a = layout();
  a.prefix = prefix.data();
  a.delta = shape.has_delta ? delta.data() : nullptr;
  a.blocks = blocks.data();
  a.norm_weight = norm_weight.data();
  a.qk_weight = qk_weight.data();
  a.output_norm_weight = shape.has_output_norm ? output_norm_weight.data() : nullptr;
  a.output = output.data();
  return a;
}

std::vector<GeneratedTensor> generated_tensors(CaseTensors& t) {
  return {{&t.prefix, InputTensor::prefix},       {&t.delta, InputTensor::delta},
          {&t.blocks, InputTensor::blocks},       {&t.norm_weight, InputTensor::norm_weight},
          {&t.qk_weight, InputTensor::qk_weight}, {&t.output_norm_weight, InputTensor::output_norm_weight}};
}

CaseTensors allocate_case_tensors(const AttnResShape& s, const AttnResStrides& strides) {
  CaseTensors t;
  t.shape = s;
  t.strides = strides;
  const std::vector<TensorLayout> layouts = case_layouts(s, strides);
  const std::vector<HostTensor*> tensors = t.all();
  for (std::size_t i = 0; i < tensors.size(); ++i) *tensors[i] = make_tensor(layouts[i]);
  parallel_for(t.output.rows(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) std::fill_n(t.output.row(row), t.output.columns, kPoisonBits);
  });
  return t;
}

CaseTensors make_case_tensors(const CaseSpec& spec) {
  CaseTensors t = allocate_case_tensors(spec.shape, spec.strides);
  for (const GeneratedTensor& g : generated_tensors(t)) {
    HostTensor& tensor = *g.tensor;
    const GeneratorKey key = make_generator_key(spec.seed, to_string(g.which));
    const ResolvedDistribution dist = resolve(spec.distributions[int(g.which)], spec.shape);
    parallel_for(tensor.rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row)
        generate_bf16_run(key, dist, std::uint64_t(row * tensor.columns), tensor.columns, tensor.row(row));
    });
  }
  return t;
}

std::string Fnv1a64::text() const { return fmt::format("fnv1a64:{:016x}", hash_); }

std::string checksum_text(std::uint64_t sum) { return fmt::format("mix64sum:{:016x}", sum); }

std::string checksum(const HostTensor& tensor) {
  std::vector<std::uint64_t> sums(std::size_t(chunk_count(tensor.rows(), 64)), 0);
  parallel_chunks(tensor.rows(), 64, [&](std::int64_t chunk, std::int64_t begin, std::int64_t end) {
    std::uint64_t sum = 0;
    for (std::int64_t row = begin; row < end; ++row) {
      const bf16_bits* values = tensor.row(row);
      for (std::int64_t col = 0; col < tensor.columns; ++col)
        sum += checksum_term(std::uint64_t(row * tensor.columns + col), values[col]);
    }
    sums[std::size_t(chunk)] = sum;
  });
  std::uint64_t total = 0;
  for (std::uint64_t sum : sums) total += sum;
  return checksum_text(total);
}

std::vector<std::pair<std::string, std::string>> input_checksums(const CaseTensors& tensors) {
  std::vector<std::pair<std::string, std::string>> sums;
  for (const HostTensor* t : tensors.all())
    if (!t->empty() && t->name != "output") sums.emplace_back(t->name, checksum(*t));
  return sums;
}

std::optional<std::int64_t> case_storage_bytes(const AttnResShape& s, const AttnResStrides& strides) {
  CheckedSize elements = 0;
  for (const TensorLayout& layout : case_layouts(s, strides)) {
    const std::optional<std::int64_t> span = checked_span(layout);
    if (!span) return std::nullopt;
    elements = elements + *span + 2 * layout.guard();
  }
  return (elements * 2).get();
}

}  // namespace attnres
