#include "app/host_tensors.h"

#include <fmt/format.h>

#include "kernels/checked_size.h"
#include "kernels/parallel.h"
#include "kernels/philox.h"
#include "reference/cpu_reference.h"

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
  return {{&t.prefix, InputTensor::prefix},           {&t.delta, InputTensor::delta},
          {&t.blocks, InputTensor::blocks},           {&t.norm_weight, InputTensor::norm_weight},
          {&t.qk_weight, InputTensor::qk_weight},     {&t.output_norm_weight, InputTensor::output_norm_weight}};
}

CaseTensors allocate_case_tensors(const AttnResShape& s, const AttnResStrides& strides) {
  CaseTensors t;
  t.shape = s;
  t.strides = strides;
  t.prefix = make_tensor("prefix", s.tokens, s.hidden, strides.prefix);
  t.delta = make_tensor("delta", s.has_delta ? s.tokens : 0, s.hidden, s.has_delta ? strides.delta : s.hidden);
  t.blocks = make_tensor("blocks", s.tokens * s.max_blocks, s.hidden, strides.blocks_row);
  t.norm_weight = make_tensor("norm_weight", 1, s.hidden, s.hidden);
  t.qk_weight = make_tensor("qk_weight", 1, s.hidden, s.hidden);
  t.output_norm_weight = make_tensor("output_norm_weight", s.has_output_norm ? 1 : 0, s.hidden, s.hidden);
  t.output = make_tensor("output", s.tokens, s.hidden, strides.output);
  parallel_for(t.output.rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row)
      for (std::int64_t col = 0; col < t.output.columns; ++col) t.output.at(row, col) = kPoisonBits;
  });
  return t;
}

CaseTensors make_case_tensors(const CaseSpec& spec) {
  CaseTensors t = allocate_case_tensors(spec.shape, spec.strides());
  for (const GeneratedTensor& g : generated_tensors(t)) {
    HostTensor& tensor = *g.tensor;
    const GeneratorKey key = make_generator_key(spec.seed, to_string(g.which));
    const ResolvedDistribution dist = resolve(spec.distributions[int(g.which)], spec.shape.hidden);
    parallel_for(tensor.rows, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row)
        for (std::int64_t col = 0; col < tensor.columns; ++col)
          tensor.at(row, col) = generate_bf16(key, dist, std::uint64_t(row * tensor.columns + col));
    });
  }
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
  const AttnResArgs args = expected.args();
  for (std::int64_t t = 0; t < before.shape.tokens; ++t) apply_residual(args, t);
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
  // Adds a later stretch's tally: its first occurrence counts only if this one has none.
  void merge(const Tally& later) {
    if (violation.count == 0) {
      violation.row = later.violation.row;
      violation.col = later.violation.col;
    }
    violation.count += later.violation.count;
  }
  void flush(std::vector<Violation>& out) const {
    if (violation.count) out.push_back(violation);
  }
};

// What one stretch of a tensor's rows shows.
struct RowsReport {
  Tally padding, input_changed, unwritten;
  std::int64_t prefix_mismatches = 0, blocks_mismatches = 0;
  std::string first_prefix_mismatch, first_blocks_mismatch;

  void merge(const RowsReport& later) {
    padding.merge(later.padding);
    input_changed.merge(later.input_changed);
    unwritten.merge(later.unwritten);
    if (prefix_mismatches == 0) first_prefix_mismatch = later.first_prefix_mismatch;
    if (blocks_mismatches == 0) first_blocks_mismatch = later.first_blocks_mismatch;
    prefix_mismatches += later.prefix_mismatches;
    blocks_mismatches += later.blocks_mismatches;
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
    const std::int64_t span = want.span();
    for (std::int64_t k = 0; k < kGuardElements; ++k) {
      if (got.storage[k] != want.storage[k]) guard_before.add(-1, k - kGuardElements);
      const std::size_t tail = std::size_t(kGuardElements + span + k);
      if (got.storage[tail] != want.storage[tail]) guard_after.add(-1, span + k);
    }
    const bool is_output = &want == &expected.output;
    const bool is_prefix = &want == &expected.prefix;
    const bool is_blocks = &want == &expected.blocks;
    constexpr std::int64_t kMinRows = 64;
    std::vector<RowsReport> parts(std::size_t(chunk_count(want.rows, kMinRows)));
    parallel_chunks(want.rows, kMinRows, [&](std::int64_t chunk, std::int64_t begin, std::int64_t end) {
      RowsReport& part = parts[std::size_t(chunk)];
      for (std::int64_t row = begin; row < end; ++row) {
        for (std::int64_t col = want.columns; col < want.row_stride; ++col)
          if (got.at(row, col) != want.at(row, col)) part.padding.add(row, col);
        const bool written_block = is_blocks && s.max_blocks > 0 && row % s.max_blocks == s.block_write_idx;
        for (std::int64_t col = 0; col < want.columns; ++col) {
          const bf16_bits g = got.at(row, col), w = want.at(row, col);
          if (is_output) {
            if (g == kPoisonBits) part.unwritten.add(row, col);
          } else if (g != w) {
            if (is_prefix) {
              if (part.prefix_mismatches++ == 0) part.first_prefix_mismatch = mismatch_text(row, col, g, w);
            } else if (written_block) {
              if (part.blocks_mismatches++ == 0)
                part.first_blocks_mismatch =
                    mismatch_text(row / s.max_blocks, col, g, w) + fmt::format(" (block {})", row % s.max_blocks);
            } else {
              part.input_changed.add(row, col);
            }
          }
        }
      }
    });
    RowsReport rows;
    rows.padding.violation = {got.name, "padding canary overwritten"};
    rows.input_changed.violation = {got.name, "input modified"};
    rows.unwritten.violation = {got.name, "output element not written (still poison)"};
    for (const RowsReport& part : parts) rows.merge(part);
    report.prefix_mismatches += rows.prefix_mismatches;
    report.blocks_mismatches += rows.blocks_mismatches;
    if (!rows.first_prefix_mismatch.empty()) report.first_prefix_mismatch = rows.first_prefix_mismatch;
    if (!rows.first_blocks_mismatch.empty()) report.first_blocks_mismatch = rows.first_blocks_mismatch;
    report.output_unwritten += rows.unwritten.violation.count;
    for (const Tally* tally : {&guard_before, &guard_after, &rows.padding, &rows.input_changed, &rows.unwritten})
      tally->flush(report.violations);
  }
  return report;
}

}  // namespace attnres
