// What the checks after a run find, wherever they run: the host loops (app/engine/checks.cpp) and the
// device reductions (app/engine/device_checks.cu) apply the same per-element rules below and return the
// same tallies, which app/engine/checks.cpp words for reports.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres {

// Kinds of damage to one tensor, in the order reports list them.
enum class Damage : int {
  guard_before,    // the guard region before the allocation overwritten
  guard_after,     // the guard region after it
  padding,         // a row's padding canary overwritten
  input_changed,   // an element of an input the kernel must not write
  unwritten,       // an output element still holding poison
  state_mismatch,  // prefix, or the written block, differs from p
};
constexpr int kDamageKinds = 6;

// Element offsets count from the start of a tensor's storage (StridedLayout::span()): negative
// in the guard region before it, span and beyond in the one after.
constexpr std::int64_t kNoOffset = INT64_MAX;

struct TensorTally {
  std::int64_t count[kDamageKinds] = {0, 0, 0, 0, 0, 0};
  std::int64_t first[kDamageKinds] = {kNoOffset, kNoOffset, kNoOffset, kNoOffset, kNoOffset, kNoOffset};
  bf16_bits state_got = 0, state_want = 0;  // at first[state_mismatch]
};

// What a tensor's logical elements must hold after a run.
enum class TensorRole : int {
  state,   // prefix: p
  blocks,  // the written block p, the others unchanged
  input,   // delta and the weights: unchanged
  output,  // anything but poison
  // After a refusal (the ABI: no operand was touched) every element must hold what it held
  // before the call: the inputs theirs, the output poison.
  untouched,
  untouched_output,
};

// The damage the element at `offset` shows (-1: none). `want` is what the element must hold
// (ignored for the output's logical elements); `logical`: not padding; `state_row`: a row that
// must hold p. An untouched tensor passes is_output and state_row false: any change is
// input_changed.
ATTNRES_HD int damage_at(std::int64_t offset, std::int64_t span, bool logical, bool is_output, bool state_row,
                         bf16_bits got, bf16_bits want) {
  if (offset < 0) return got != want ? int(Damage::guard_before) : -1;
  if (offset >= span) return got != want ? int(Damage::guard_after) : -1;
  if (!logical) return got != want ? int(Damage::padding) : -1;
  if (is_output) return got == kPoisonBits ? int(Damage::unwritten) : -1;
  if (got == want) return -1;
  return state_row ? int(Damage::state_mismatch) : int(Damage::input_changed);
}

// The canary the probe call (the first of a case's two calls) finds at storage `offset` of the
// tensor at CaseTensors::all() index `tensor`: different per tensor and per element, drawn from the
// case's seed, so that neither a copy between tensors or rows nor a constant fill reproduces it.
// Finite and normal (|x| in [2^-7, 2^9)), and never the judged call's constant kCanaryBits.
ATTNRES_HD bf16_bits patterned_canary(std::uint64_t seed, int tensor, std::int64_t offset) {
  std::uint64_t x =
      seed ^ (std::uint64_t(tensor + 1) * 0x9e3779b97f4a7c15ull) ^ (std::uint64_t(offset) * 0xbf58476d1ce4e5b9ull);
  x = (x ^ (x >> 31)) * 0x94d049bb133111ebull;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  const unsigned sign = unsigned(x >> 15) & 1u, exponent = 0x78u + (unsigned(x >> 7) & 0xfu),
                 mantissa = unsigned(x) & 0x7fu;
  const bf16_bits bits = bf16_bits(sign << 15 | exponent << 7 | mantissa);
  return bits == kCanaryBits ? bf16_bits(bits ^ 1u) : bits;
}

ATTNRES_HD bool is_finite_value(double x) { return x == x && x != INFINITY && x != -INFINITY; }

// |got - want| as the comparison sees it: a non-finite value matches only the same non-finite
// reference (torch's equal_nan=False), otherwise it is infinitely far off.
ATTNRES_HD double output_difference(double got, double want) {
  if (is_finite_value(got) && is_finite_value(want)) return fabs(got - want);
  return got == want ? 0.0 : INFINITY;
}

ATTNRES_HD bool output_mismatch(double got, double want, double difference, double atol, double rtol) {
  return !(got == want || (is_finite_value(got) && is_finite_value(want) && difference <= atol + rtol * fabs(want)));
}

// Logical output elements whose bits differ between two calls (index t * H + h of the first).
struct OutputDifference {
  std::int64_t count = 0;
  std::int64_t first_index = kNoOffset;
  bf16_bits first_before = 0, first_now = 0;  // the other call's bits, this call's
};

// The spacing of bf16 values at |x| (2^(e-8) for |x| in [2^(e-1), 2^e); 0 at 0 and for values
// that are not finite): a correct kernel's output is within about one of it of the reference.
ATTNRES_HD double bf16_spacing(double x) {
  const double a = fabs(x);
  if (!(a > 0) || !is_finite_value(a)) return 0;
  int exponent = 0;
  frexp(a, &exponent);
  return ldexp(1.0, exponent - 8);
}

// The output against the reference over the logical [T, H] elements.
struct OutputTally {
  std::int64_t mismatched = 0, nan_count = 0, inf_count = 0;
  double max_abs_error = 0, max_rel_error = 0;
  std::int64_t worst_index = 0;  // t * H + h of the first element with the largest difference
  double worst_value = 0, worst_reference = 0;
  // Over the elements where output and reference are both finite: the sums of out - ref and of
  // bf16_spacing(ref), and how many.
  double signed_error_sum = 0, spacing_sum = 0;
  std::int64_t finite_pairs = 0;
};

}  // namespace attnres
