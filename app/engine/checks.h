// The checks after a run: the output against the float64 reference, and the state every
// tensor must be left in. Host loops here; the CUDA backend runs the same rules as device
// reductions (app/engine/device_checks.h), and both are worded by the functions here.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "app/casefile/host_tensors.h"
#include "app/engine/check_tally.h"

namespace attnres {

struct Comparison {
  std::string reference;  // "cpu-float64" or "cublas-float64"
  double atol = 0, rtol = 0;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::int64_t worst_token = -1, worst_column = -1;
  double worst_value = 0, worst_reference = 0;
  std::int64_t mismatched = 0, total = 0;  // elements with |out - ref| > atol + rtol * |ref|
  std::int64_t nan_count = 0, inf_count = 0;
  std::int64_t prefix_mismatches = 0, blocks_mismatches = 0;
  std::string first_prefix_mismatch, first_blocks_mismatch;
  // The mean of out - ref, and of the bf16 spacing at ref, over the finite elements. A correct
  // kernel rounds to bf16 once, with errors that average out: a mean error of more than
  // kSystematicSpacings spacings is a bias (a +0.07 on every element passes the tolerance, and
  // is wrong), whatever the tolerance says.
  double mean_error = 0, mean_spacing = 0;
  static constexpr double kSystematicSpacings = 2.0;

  bool within_tolerance() const { return mismatched == 0; }
  bool systematic() const { return std::fabs(mean_error) > kSystematicSpacings * mean_spacing; }
  bool exact_state() const { return prefix_mismatches == 0 && blocks_mismatches == 0; }
  // "Mismatched elements: 3 / 2293760 (0.0%)", as torch.testing.assert_close words it.
  std::string mismatch_summary() const;
};

// The comparison in words: the worst element, the mismatch count, NaN and Inf, inexact state, bias.
std::string describe_comparison(const Comparison& c);

// The comparison of a [tokens, hidden] output whose tally is `tally`.
Comparison comparison_from(const OutputTally& tally, std::int64_t tokens, std::int64_t hidden, double atol,
                           double rtol);

// Elementwise |out - ref| <= atol + rtol * |ref| over the logical [T, H] output, on every core.
Comparison compare_output(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol);

// |out - ref| over the [T, H] output pooled into at most kErrorMapRows x kErrorMapColumns cells:
// each cell holds the largest difference among its elements and how many are out of tolerance.
// Element (t, h) lies in cell (t * rows / T, h * columns / H).
constexpr std::int64_t kErrorMapRows = 64, kErrorMapColumns = 128;
struct ErrorMap {
  std::int64_t rows = 0, columns = 0;   // cells
  std::int64_t tokens = 0, hidden = 0;  // elements mapped
  std::vector<double> max_error;        // rows * columns, row-major; Infinity where a non-finite output is off
  std::vector<std::int64_t> mismatched;
};
// The map's shape for a [tokens, hidden] output, with no element seen yet.
ErrorMap empty_error_map(std::int64_t tokens, std::int64_t hidden);
ErrorMap error_map(const HostTensor& output, const std::vector<double>& reference, double atol, double rtol);

struct Violation {
  std::string tensor;
  std::string kind;                 // e.g. "padding canary overwritten"
  std::int64_t row = -1, col = -1;  // first offending element (row -1: a guard region, col = offset)
  std::int64_t count = 0;
  std::string to_string() const;
};

struct ExactnessReport {
  std::int64_t prefix_mismatches = 0;
  std::int64_t blocks_mismatches = 0;
  std::string first_prefix_mismatch;  // "row r col c: got 0x..., expected 0x..."
  std::string first_blocks_mismatch;
  std::int64_t output_unwritten = 0;
  std::vector<Violation> violations;  // memory safety: canaries, guards, changed inputs, unwritten output
};

// The role of each of the seven tensors, in CaseTensors::all() order, after a run and after a
// refusal.
TensorRole tensor_role(std::size_t index);
TensorRole untouched_role(std::size_t index);

// The report of the seven tensors' tallies, in CaseTensors::all() order, laid out by `layouts`;
// `refused`: the tallies are of untouched roles, and a changed element is worded as written
// although the kernel refused.
ExactnessReport exactness_report(const std::vector<TensorTally>& tallies, const std::vector<TensorLayout>& layouts,
                                 const AttnResShape& shape, bool refused);

// What prefix and blocks must hold after a correct run (the reference's own steps 1-2),
// padding and guards untouched; the other inputs must equal their originals, the output's
// padding and guards likewise. The CPU reference leaves the same in the buffers it runs on.
CaseTensors expected_after_run(const CaseTensors& before);

// `after` against `expected`, on every core.
ExactnessReport check_after_run(const CaseTensors& after, const CaseTensors& expected);

// The logical elements of two outputs of one layout whose bits differ.
OutputDifference output_bits_difference(const HostTensor& now, const HostTensor& before);

// After a refusal: `after` against the tensors as they were before the call, every element.
ExactnessReport check_untouched(const CaseTensors& after, const CaseTensors& before);

// The probe call's canaries: every guard and padding element set to patterned_canary(seed, i,
// offset), i the tensor's CaseTensors::all() index; and those that no longer hold it.
void fill_patterned_canaries(CaseTensors& tensors, std::uint64_t seed);
ExactnessReport check_patterned_canaries(const CaseTensors& tensors, std::uint64_t seed);

}  // namespace attnres
