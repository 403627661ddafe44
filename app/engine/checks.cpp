#include "app/engine/checks.h"

#include <fmt/format.h>

#include "kernels/common/parallel.h"
#include "reference/cpu_reference.h"

namespace attnres {

std::string Comparison::mismatch_summary() const {
  const double percent = total ? 100.0 * double(mismatched) / double(total) : 0.0;
  return fmt::format("Mismatched elements: {} / {} ({:.1f}%)", mismatched, total, percent);
}

std::string describe_comparison(const Comparison& c) {
  if (c.total == 0) return "no output elements to compare (T = 0)";
  std::string text =
      fmt::format("max-abs error {:.4g} at [{}, {}] (got {:.6g}, reference {:.6g}) against atol {:g} + rtol {:g}; {}",
                  c.max_abs_error, c.worst_token, c.worst_column, c.worst_value, c.worst_reference, c.atol, c.rtol,
                  c.mismatch_summary());
  if (c.nan_count || c.inf_count) text += fmt::format("; {} NaN, {} Inf in output", c.nan_count, c.inf_count);
  if (c.prefix_mismatches)
    text +=
        fmt::format("; prefix not bit-exact in {} elements (first {})", c.prefix_mismatches, c.first_prefix_mismatch);
  if (c.blocks_mismatches)
    text += fmt::format("; written block not bit-exact in {} elements (first {})", c.blocks_mismatches,
                        c.first_blocks_mismatch);
  if (c.systematic())
    text += fmt::format(
        "; systematic error: out - ref averages {:+.4g} where the reference's bf16 spacing averages {:.3g}, "
        "more than {:g} spacings; a correct kernel's rounding errors average out",
        c.mean_error, c.mean_spacing, Comparison::kSystematicSpacings);
  return text;
}

Comparison comparison_from(const OutputTally& tally, std::int64_t tokens, std::int64_t hidden, double atol,
                           double rtol) {
  Comparison c;
  c.atol = atol;
  c.rtol = rtol;
  c.total = tokens * hidden;
  c.mismatched = tally.mismatched;
  c.nan_count = tally.nan_count;
  c.inf_count = tally.inf_count;
  c.max_abs_error = tally.max_abs_error;
  c.max_rel_error = tally.max_rel_error;
  c.worst_token = tally.worst_index / hidden;
  c.worst_column = tally.worst_index % hidden;
  c.worst_value = tally.worst_value;
  c.worst_reference = tally.worst_reference;
  if (tally.finite_pairs) {
    c.mean_error = tally.signed_error_sum / double(tally.finite_pairs);
    c.mean_spacing = tally.spacing_sum / double(tally.finite_pairs);
  }
  return c;
}

namespace {

// One chunk of rows of compare_output; `worst` is -1 until an element is seen.
OutputTally tally_output_rows(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol,
                              std::int64_t row_begin, std::int64_t row_end, double& worst) {
  OutputTally tally;
  for (std::int64_t t = row_begin; t < row_end; ++t) {
    const bf16_bits* values = output.row(t);
    for (std::int64_t h = 0; h < output.columns; ++h) {
      const double got = bf16_to_float(values[h]);
      const std::int64_t index = t * output.columns + h;
      const double want = reference[std::size_t(index)];
      if (got != got)
        ++tally.nan_count;
      else if (!is_finite_value(got))
        ++tally.inf_count;
      const double difference = output_difference(got, want);
      if (output_mismatch(got, want, difference, atol, rtol)) ++tally.mismatched;
      if (difference > worst) {
        worst = difference;
        tally.worst_index = index;
        tally.worst_value = got;
        tally.worst_reference = want;
      }
      if (is_finite_value(difference) && want != 0.0)
        tally.max_rel_error = std::fmax(tally.max_rel_error, difference / std::fabs(want));
      if (is_finite_value(got) && is_finite_value(want)) {
        tally.signed_error_sum += got - want;
        tally.spacing_sum += bf16_spacing(want);
        ++tally.finite_pairs;
      }
    }
  }
  return tally;
}

}  // namespace

Comparison compare_output(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol) {
  constexpr std::int64_t kMinRows = 64;
  std::vector<OutputTally> parts(std::size_t(chunk_count(output.rows(), kMinRows)));
  std::vector<double> worsts(parts.size(), -1.0);
  parallel_chunks(output.rows(), kMinRows, [&](std::int64_t chunk, std::int64_t begin, std::int64_t end) {
    parts[std::size_t(chunk)] =
        tally_output_rows(output, reference, atol, rtol, begin, end, worsts[std::size_t(chunk)]);
  });
  OutputTally total;
  double worst = -1.0;
  // In row order, the first of equal worst differences wins, as in one pass over the rows.
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const OutputTally& p = parts[i];
    total.mismatched += p.mismatched;
    total.nan_count += p.nan_count;
    total.inf_count += p.inf_count;
    total.max_rel_error = std::fmax(total.max_rel_error, p.max_rel_error);
    total.signed_error_sum += p.signed_error_sum;
    total.spacing_sum += p.spacing_sum;
    total.finite_pairs += p.finite_pairs;
    if (worsts[i] > worst) {
      worst = worsts[i];
      total.worst_index = p.worst_index;
      total.worst_value = p.worst_value;
      total.worst_reference = p.worst_reference;
    }
  }
  total.max_abs_error = std::fmax(worst, 0.0);
  return comparison_from(total, output.rows(), output.columns, atol, rtol);
}

ErrorMap empty_error_map(std::int64_t tokens, std::int64_t hidden) {
  ErrorMap map;
  map.rows = std::min(tokens, kErrorMapRows);
  map.columns = std::min(hidden, kErrorMapColumns);
  map.tokens = tokens;
  map.hidden = hidden;
  map.max_error.assign(std::size_t(map.rows * map.columns), 0.0);
  map.mismatched.assign(map.max_error.size(), 0);
  return map;
}

ErrorMap error_map(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol) {
  ErrorMap map = empty_error_map(output.rows(), output.columns);
  if (map.rows == 0) return map;  // T = 0
  // Rows of cells are disjoint sets of tokens: one thread per band of cell rows.
  parallel_for(map.rows, [&](std::int64_t first_cell_row, std::int64_t end_cell_row) {
    const std::int64_t t_begin = (first_cell_row * map.tokens + map.rows - 1) / map.rows;
    const std::int64_t t_end = (end_cell_row * map.tokens + map.rows - 1) / map.rows;
    for (std::int64_t t = t_begin; t < t_end; ++t) {
      const bf16_bits* values = output.row(t);
      for (std::int64_t h = 0; h < output.columns; ++h) {
        const double got = bf16_to_float(values[h]), want = reference[std::size_t(t * output.columns + h)];
        const double difference = output_difference(got, want);
        const std::size_t cell = std::size_t((t * map.rows / map.tokens) * map.columns + h * map.columns / map.hidden);
        map.max_error[cell] = std::fmax(map.max_error[cell], difference);
        map.mismatched[cell] += output_mismatch(got, want, difference, atol, rtol);
      }
    }
  });
  return map;
}

std::string Violation::to_string() const {
  if (row < 0) return fmt::format("{}: {} at offset {} ({} elements)", tensor, kind, col, count);
  return fmt::format("{}: {} at row {} col {} ({} elements)", tensor, kind, row, col, count);
}

TensorRole untouched_role(std::size_t index) {
  return index == 6 ? TensorRole::untouched_output : TensorRole::untouched;
}

TensorRole tensor_role(std::size_t index) {
  switch (index) {
    case 0: return TensorRole::state;
    case 2: return TensorRole::blocks;
    case 6: return TensorRole::output;
    default: return TensorRole::input;
  }
}

namespace {

std::string mismatch_text(std::int64_t row, std::int64_t col, bf16_bits got, bf16_bits want) {
  return fmt::format("row {} col {}: got 0x{:04x} ({}), expected 0x{:04x} ({})", row, col, got, bf16_to_float(got),
                     want, bf16_to_float(want));
}

void add_damage(TensorTally& tally, int kind, std::int64_t offset, bf16_bits got, bf16_bits want) {
  ++tally.count[kind];
  if (offset >= tally.first[kind]) return;
  tally.first[kind] = offset;
  if (kind == int(Damage::state_mismatch)) {
    tally.state_got = got;
    tally.state_want = want;
  }
}

void merge_tally(TensorTally& into, const TensorTally& other) {
  for (int kind = 0; kind < kDamageKinds; ++kind) {
    into.count[kind] += other.count[kind];
    if (other.first[kind] < into.first[kind]) {
      into.first[kind] = other.first[kind];
      if (kind == int(Damage::state_mismatch)) {
        into.state_got = other.state_got;
        into.state_want = other.state_want;
      }
    }
  }
}

bool is_state_row(TensorRole role, std::int64_t row, const AttnResShape& s) {
  return role == TensorRole::state ||
         (role == TensorRole::blocks && s.max_blocks > 0 && row % s.max_blocks == s.block_write_idx);
}

TensorTally tally_tensor(const HostTensor& got, const HostTensor& want, TensorRole role, const AttnResShape& s) {
  const std::int64_t span = want.span();
  const bool is_output = role == TensorRole::output;  // untouched roles: every element as it was
  auto visit = [&](TensorTally& tally, std::int64_t offset, bool logical, bool state_row) {
    const bf16_bits g = got.base()[offset], w = want.base()[offset];
    const int kind = damage_at(offset, span, logical, is_output, state_row, g, w);
    if (kind >= 0) add_damage(tally, kind, offset, g, w);
  };
  TensorTally total;
  for (std::int64_t k = 0; k < want.guard(); ++k) {
    visit(total, k - want.guard(), false, false);
    visit(total, span + k, false, false);
  }
  const std::int64_t majors = want.nesting().major;
  const std::int64_t min_majors =
      std::max<std::int64_t>(1, (std::int64_t(1) << 16) / std::max<std::int64_t>(1, span / majors + 1));
  std::vector<TensorTally> parts(std::size_t(chunk_count(majors, min_majors)));
  parallel_chunks(majors, min_majors, [&](std::int64_t chunk, std::int64_t begin, std::int64_t end) {
    TensorTally& part = parts[std::size_t(chunk)];
    for_each_storage_run(want, begin, end,
                         [&](std::int64_t run_begin, std::int64_t run_end, std::int64_t row, bool logical) {
                           const bool state_row = row >= 0 && is_state_row(role, row, s);
                           for (std::int64_t offset = run_begin; offset < run_end; ++offset)
                             visit(part, offset, logical, state_row);
                         });
  });
  for (const TensorTally& part : parts) merge_tally(total, part);
  return total;
}

}  // namespace

ExactnessReport exactness_report(const std::vector<TensorTally>& tallies, const std::vector<TensorLayout>& layouts,
                                 const AttnResShape& shape, bool refused) {
  static const char* const kWording[] = {"guard region before the allocation overwritten",
                                         "guard region after the allocation overwritten", "padding canary overwritten",
                                         "input modified", "output element not written (still poison)"};
  static const char* const kRefusedWording = "written although the kernel refused";
  ExactnessReport report;
  for (std::size_t i = 0; i < tallies.size(); ++i) {
    const TensorTally& tally = tallies[i];
    const TensorLayout& layout = layouts[i];
    auto violation_at = [&](int kind) {
      Violation v{layout.name, refused && kind == int(Damage::input_changed) ? kRefusedWording : kWording[kind]};
      const std::int64_t offset = tally.first[kind];
      v.count = tally.count[kind];
      const StridedLayout::Location at = layout.locate(offset);
      if (offset < 0 || offset >= layout.span() || at.row < 0) {
        v.col = offset;  // in a guard region, or in storage outside every row
      } else {
        v.row = at.row;
        v.col = at.col;
      }
      return v;
    };
    for (const Damage kind :
         {Damage::guard_before, Damage::guard_after, Damage::padding, Damage::input_changed, Damage::unwritten})
      if (tally.count[int(kind)]) report.violations.push_back(violation_at(int(kind)));
    report.output_unwritten += tally.count[int(Damage::unwritten)];
    const std::int64_t mismatches = tally.count[int(Damage::state_mismatch)];
    if (!mismatches) continue;
    const StridedLayout::Location at = layout.locate(tally.first[int(Damage::state_mismatch)]);
    const std::int64_t row = at.row, col = at.col;
    if (tensor_role(i) == TensorRole::blocks) {
      report.blocks_mismatches += mismatches;
      report.first_blocks_mismatch = mismatch_text(row / shape.max_blocks, col, tally.state_got, tally.state_want) +
                                     fmt::format(" (block {})", row % shape.max_blocks);
    } else {
      report.prefix_mismatches += mismatches;
      report.first_prefix_mismatch = mismatch_text(row, col, tally.state_got, tally.state_want);
    }
  }
  return report;
}

CaseTensors expected_after_run(const CaseTensors& before) {
  CaseTensors expected = before;
  const AttnResArgs args = expected.args();
  parallel_for(before.shape.tokens, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) apply_residual(args, t);
  });
  return expected;
}

namespace {

// Each of `after`'s tensors against `want`'s, in the roles `role_of` gives.
ExactnessReport report_against(const CaseTensors& after, const CaseTensors& want, TensorRole (*role_of)(std::size_t),
                               bool refused) {
  const auto got = after.all(), wanted = want.all();
  std::vector<TensorTally> tallies;
  std::vector<TensorLayout> layouts;
  for (std::size_t i = 0; i < got.size(); ++i) {
    tallies.push_back(tally_tensor(*got[i], *wanted[i], role_of(i), want.shape));
    layouts.push_back(*wanted[i]);
  }
  return exactness_report(tallies, layouts, want.shape, refused);
}

}  // namespace

ExactnessReport check_after_run(const CaseTensors& after, const CaseTensors& expected) {
  return report_against(after, expected, tensor_role, false);
}

ExactnessReport check_untouched(const CaseTensors& after, const CaseTensors& before) {
  return report_against(after, before, untouched_role, true);
}

OutputDifference output_bits_difference(const HostTensor& now, const HostTensor& before) {
  OutputDifference d;
  for (std::int64_t t = 0; t < now.rows(); ++t)
    for (std::int64_t h = 0; h < now.columns; ++h) {
      if (now.at(t, h) == before.at(t, h)) continue;
      if (d.count++ == 0) {
        d.first_index = t * now.columns + h;
        d.first_before = before.at(t, h);
        d.first_now = now.at(t, h);
      }
    }
  return d;
}

namespace {

// `visit(offset)` on every guard and padding element of `t`, in storage order.
template <class Visit>
void for_each_canary(const HostTensor& t, Visit&& visit) {
  for (std::int64_t k = -t.guard(); k < 0; ++k) visit(k);
  for_each_storage_run(t, 0, t.nesting().major, [&](std::int64_t begin, std::int64_t end, std::int64_t, bool logical) {
    if (!logical)
      for (std::int64_t offset = begin; offset < end; ++offset) visit(offset);
  });
  for (std::int64_t k = 0; k < t.guard(); ++k) visit(t.span() + k);
}

}  // namespace

void fill_patterned_canaries(CaseTensors& tensors, std::uint64_t seed) {
  const std::vector<HostTensor*> all = tensors.all();
  for (std::size_t i = 0; i < all.size(); ++i) {
    HostTensor& t = *all[i];
    for_each_canary(t, [&](std::int64_t offset) { t.base()[offset] = patterned_canary(seed, int(i), offset); });
  }
}

ExactnessReport check_patterned_canaries(const CaseTensors& tensors, std::uint64_t seed) {
  const std::vector<const HostTensor*> all = tensors.all();
  std::vector<TensorTally> tallies;
  std::vector<TensorLayout> layouts;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const HostTensor& t = *all[i];
    TensorTally tally;
    for_each_canary(t, [&](std::int64_t offset) {
      const bf16_bits got = t.base()[offset], want = patterned_canary(seed, int(i), offset);
      const int kind = damage_at(offset, t.span(), false, false, false, got, want);
      if (kind >= 0) add_damage(tally, kind, offset, got, want);
    });
    tallies.push_back(tally);
    layouts.push_back(t);
  }
  return exactness_report(tallies, layouts, tensors.shape, false);
}

}  // namespace attnres
