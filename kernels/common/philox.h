// Counter-based input generator: (seed, tensor name, logical element index) -> bf16 bits.
// Host and device run this same code, and it uses only integer ops, one correctly rounded
// multiply and explicit fma, so the bits agree on CPU and GPU by construction.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres {

struct Philox4x32 {
  std::uint32_t v[4];
};

ATTNRES_HD void mul_hi_lo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = std::uint64_t(a) * std::uint64_t(b);
  hi = std::uint32_t(product >> 32);
  lo = std::uint32_t(product);
}

// Philox4x32-10 (Salmon et al., SC'11): its round count, multipliers and key increments (the
// host generator's AVX2 lanes, kernels/common/host_generator.cpp, run the same rounds).
constexpr int kPhiloxRounds = 10;
constexpr std::uint32_t kPhiloxMultiplier0 = 0xD2511F53u, kPhiloxMultiplier1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxKeyStep0 = 0x9E3779B9u, kPhiloxKeyStep1 = 0xBB67AE85u;

ATTNRES_HD Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t key0, std::uint32_t key1) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kPhiloxMultiplier0, counter.v[0], hi0, lo0);
    mul_hi_lo(kPhiloxMultiplier1, counter.v[2], hi1, lo1);
    counter = Philox4x32{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += kPhiloxKeyStep0;
    key1 += kPhiloxKeyStep1;
  }
  return counter;
}

enum class DistributionKind : int { normal = 0, uniform = 1, constant = 2 };

constexpr int kMaxScaledBlocks = 64;

// A distribution with everything precomputed on the host (e.g. std already divided by sqrt(H)),
// so the device does exactly the host's arithmetic.
struct ResolvedDistribution {
  DistributionKind kind = DistributionKind::normal;
  double a = 0.0;  // normal: mean; uniform: low;  constant: value
  double b = 1.0;  // normal: std;  uniform: high - low
  // The blocks' per-block scales: logical row r (row_length elements) is block r % block_period,
  // whose a and b are multiplied by block_scale[r % block_period]. 0: no scales.
  int block_period = 0;
  std::int64_t row_length = 0;
  double block_scale[kMaxScaledBlocks] = {};
};

struct GeneratorKey {
  std::uint32_t key0 = 0;
  std::uint32_t key1 = 0;
};

// FNV-1a of the tensor name mixed into the seed: each tensor gets its own stream.
inline GeneratorKey make_generator_key(std::uint64_t seed, const char* tensor_name) {
  std::uint32_t hash = 2166136261u;
  for (const char* c = tensor_name; *c; ++c) hash = (hash ^ std::uint8_t(*c)) * 16777619u;
  return GeneratorKey{std::uint32_t(seed) ^ hash, std::uint32_t(seed >> 32)};
}

// The random bits of element `index`: one Philox4x32-10 block, counter (index, 0, 0).
ATTNRES_HD Philox4x32 random_bits(const GeneratorKey& key, std::uint64_t index) {
  return philox4x32_10(Philox4x32{{std::uint32_t(index), std::uint32_t(index >> 32), 0u, 0u}}, key.key0, key.key1);
}

// Element `index` of the distribution from its random bits r (unused for a constant).
// Normal values are Irwin-Hall sums of four 24-bit uniforms, scaled to variance 1
// (bounded at +-3.46 sigma): no transcendental function whose last bit could differ by platform.
ATTNRES_HD bf16_bits bf16_from_random_bits(const ResolvedDistribution& dist, std::uint64_t index, const Philox4x32& r) {
  double a = dist.a, b = dist.b;
  if (dist.block_period > 0) {
    const double scale = dist.block_scale[(index / std::uint64_t(dist.row_length)) % std::uint64_t(dist.block_period)];
    a *= scale;
    b *= scale;
  }
  if (dist.kind == DistributionKind::constant) return float_to_bf16(float(a));
  double value;
  if (dist.kind == DistributionKind::uniform) {
    const double u = double(r.v[0] >> 8) * (1.0 / 16777216.0);
    value = fma(b, u, a);
  } else {
    const std::int64_t sum = std::int64_t(r.v[0] >> 8) + (r.v[1] >> 8) + (r.v[2] >> 8) + (r.v[3] >> 8);
    const double standard = double(sum - (std::int64_t(1) << 25)) * (1.7320508075688772 / 16777216.0);
    value = fma(b, standard, a);
  }
  return float_to_bf16(float(value));
}

ATTNRES_HD bf16_bits generate_bf16(const GeneratorKey& key, const ResolvedDistribution& dist, std::uint64_t index) {
  if (dist.kind == DistributionKind::constant) return bf16_from_random_bits(dist, index, Philox4x32{});
  return bf16_from_random_bits(dist, index, random_bits(key, index));
}

}  // namespace attnres
