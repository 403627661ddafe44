#include "app/host_tensors.h"

#include <fmt/format.h>

#include "kernels/checked_size.h"
#include "kernels/philox.h"

namespace attnres {

HostTensor make_tensor(std::string name, std::int64_t rows, std::int64_t columns, std::int64_t row_stride) {
  const std::optional<std::int64_t> elements = (CheckedSize(rows) * row_stride + 2 * kGuardElements).get();
  if (!elements || std::uint64_t(*elements) > std::vector<bf16_bits>().max_size())
    throw std::length_error(fmt::format("{}: {} rows of stride {} do not fit in memory", name, rows, row_stride));
  HostTensor t;
  t.name = std::move(name);
  t.rows = rows;
  t.columns = columns;
  t.row_stride = row_stride;
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
  a.strides.prefix = prefix.row_stride;
  a.strides.delta = shape.has_delta ? delta.row_stride : 0;
  a.strides.output = output.row_stride;
  a.strides.blocks_row = blocks.row_stride;
  a.strides.blocks_token = std::int64_t(shape.max_blocks) * blocks.row_stride;
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

namespace {

void generate(HostTensor& tensor, const CaseSpec& spec, InputTensor which) {
  const GeneratorKey key = make_generator_key(spec.seed, to_string(which));
  const ResolvedDistribution dist = resolve(spec.distributions[int(which)], spec.shape.hidden);
  for (std::int64_t row = 0; row < tensor.rows; ++row)
    for (std::int64_t col = 0; col < tensor.columns; ++col)
      tensor.at(row, col) = generate_bf16(key, dist, std::uint64_t(row * tensor.columns + col));
}

}  // namespace

CaseTensors make_case_tensors(const CaseSpec& spec) {
  const AttnResShape& s = spec.shape;
  CaseTensors t;
  t.shape = s;
  t.prefix = make_tensor("prefix", s.tokens, s.hidden, spec.prefix_row_stride);
  t.delta = make_tensor("delta", s.has_delta ? s.tokens : 0, s.hidden, spec.delta_row_stride);
  t.blocks = make_tensor("blocks", s.tokens * s.max_blocks, s.hidden, spec.blocks_row_stride);
  t.norm_weight = make_tensor("norm_weight", 1, s.hidden, s.hidden);
  t.qk_weight = make_tensor("qk_weight", 1, s.hidden, s.hidden);
  t.output_norm_weight = make_tensor("output_norm_weight", s.has_output_norm ? 1 : 0, s.hidden, s.hidden);
  t.output = make_tensor("output", s.tokens, s.hidden, spec.output_row_stride);
  generate(t.prefix, spec, InputTensor::prefix);
  generate(t.delta, spec, InputTensor::delta);
  generate(t.blocks, spec, InputTensor::blocks);
  generate(t.norm_weight, spec, InputTensor::norm_weight);
  generate(t.qk_weight, spec, InputTensor::qk_weight);
  generate(t.output_norm_weight, spec, InputTensor::output_norm_weight);
  for (std::int64_t row = 0; row < t.output.rows; ++row)
    for (std::int64_t col = 0; col < t.output.columns; ++col) t.output.at(row, col) = kPoisonBits;
  return t;
}

std::string Fnv1a64::text() const { return fmt::format("fnv1a64:{:016x}", hash_); }

std::string checksum(const HostTensor& tensor) {
  Fnv1a64 hash;
  for (std::int64_t row = 0; row < tensor.rows; ++row)
    for (std::int64_t col = 0; col < tensor.columns; ++col) hash.add(tensor.at(row, col));
  return hash.text();
}

std::optional<std::int64_t> case_storage_bytes(const AttnResShape& s, const AttnResStrides& strides) {
  auto storage = [](CheckedSize rows, CheckedSize row_stride) { return (rows * row_stride + 2 * kGuardElements) * 2; };
  const CheckedSize tokens = s.tokens;
  const CheckedSize total = storage(tokens, strides.prefix) + storage(s.has_delta ? tokens : 0, strides.delta) +
                            storage(tokens * s.max_blocks, strides.blocks_row) + storage(1, s.hidden) * 2 +
                            storage(s.has_output_norm ? 1 : 0, s.hidden) + storage(tokens, strides.output);
  return total.get();
}

CaseTensors expected_after_run(const CaseTensors& before) {
  CaseTensors expected = before;
  const AttnResShape& s = before.shape;
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < s.hidden; ++h) {
      float sum = bf16_to_float(before.prefix.at(t, h));
      if (s.has_delta) sum += bf16_to_float(before.delta.at(t, h));
      const bf16_bits p = float_to_bf16(sum);
      expected.prefix.at(t, h) = p;
      if (s.block_write_idx >= 0) expected.blocks.at(t * s.max_blocks + s.block_write_idx, h) = p;
    }
  return expected;
}

std::string Violation::to_string() const {
  if (row < 0) return fmt::format("{}: {} at offset {} ({} elements)", tensor, kind, col, count);
  return fmt::format("{}: {} at row {} col {} ({} elements)", tensor, kind, row, col, count);
}

namespace {

// Counts and remembers the first occurrence of one kind of damage to one tensor.
struct Tally {
  Violation violation;
  void add(std::int64_t row, std::int64_t col) {
    if (violation.count++ == 0) {
      violation.row = row;
      violation.col = col;
    }
  }
  void flush(std::vector<Violation>& out) const {
    if (violation.count) out.push_back(violation);
  }
};

std::string mismatch_text(std::int64_t row, std::int64_t col, bf16_bits got, bf16_bits want) {
  return fmt::format("row {} col {}: got 0x{:04x} ({}), expected 0x{:04x} ({})", row, col, got, bf16_to_float(got),
                     want, bf16_to_float(want));
}

}  // namespace

ExactnessReport check_after_run(const CaseTensors& after, const CaseTensors& expected) {
  ExactnessReport report;
  const AttnResShape& s = expected.shape;
  const auto after_tensors = after.all();
  const auto expected_tensors = expected.all();
  for (std::size_t i = 0; i < after_tensors.size(); ++i) {
    const HostTensor& got = *after_tensors[i];
    const HostTensor& want = *expected_tensors[i];
    Tally guard_before{{got.name, "guard region before the allocation overwritten"}};
    Tally guard_after{{got.name, "guard region after the allocation overwritten"}};
    Tally padding{{got.name, "padding canary overwritten"}};
    Tally input_changed{{got.name, "input modified"}};
    Tally unwritten{{got.name, "output element not written (still poison)"}};
    const std::int64_t span = want.span();
    for (std::int64_t k = 0; k < kGuardElements; ++k) {
      if (got.storage[k] != want.storage[k]) guard_before.add(-1, k - kGuardElements);
      const std::size_t tail = std::size_t(kGuardElements + span + k);
      if (got.storage[tail] != want.storage[tail]) guard_after.add(-1, span + k);
    }
    const bool is_output = &want == &expected.output;
    const bool is_prefix = &want == &expected.prefix;
    const bool is_blocks = &want == &expected.blocks;
    for (std::int64_t row = 0; row < want.rows; ++row) {
      for (std::int64_t col = want.columns; col < want.row_stride; ++col)
        if (got.at(row, col) != want.at(row, col)) padding.add(row, col);
      const bool written_block = is_blocks && s.max_blocks > 0 && row % s.max_blocks == s.block_write_idx;
      for (std::int64_t col = 0; col < want.columns; ++col) {
        const bf16_bits g = got.at(row, col), w = want.at(row, col);
        if (is_output) {
          if (g == kPoisonBits) unwritten.add(row, col);
        } else if (g != w) {
          if (is_prefix) {
            if (report.prefix_mismatches++ == 0) report.first_prefix_mismatch = mismatch_text(row, col, g, w);
          } else if (written_block) {
            if (report.blocks_mismatches++ == 0)
              report.first_blocks_mismatch =
                  mismatch_text(row / s.max_blocks, col, g, w) + fmt::format(" (block {})", row % s.max_blocks);
          } else {
            input_changed.add(row, col);
          }
        }
      }
    }
    report.output_unwritten += unwritten.violation.count;
    for (const Tally* tally : {&guard_before, &guard_after, &padding, &input_changed, &unwritten})
      tally->flush(report.violations);
  }
  return report;
}

}  // namespace attnres
