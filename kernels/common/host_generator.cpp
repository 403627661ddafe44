#include "kernels/common/host_generator.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attnres {
namespace {

#if defined(__x86_64__)
constexpr int kLanes = 8;

// Philox4x32-10 of the counters (first_index + lane, 0, 0), lane 0..7, each 32-bit word of the
// state in one register of eight lanes. _mm256_mul_epu32 multiplies the even lanes (32x32 -> 64),
// so each multiply is done twice, for the even lanes and for the odd ones shifted down.
__attribute__((target("avx2"))) void philox_lanes(const GeneratorKey& key, std::uint64_t first_index,
                                                  std::uint32_t (&out)[4][kLanes]) {
  alignas(32) std::uint32_t low[kLanes], high[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    low[lane] = std::uint32_t(first_index + lane);
    high[lane] = std::uint32_t((first_index + lane) >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(low));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(high));
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  __m256i k0 = _mm256_set1_epi32(int(key.key0)), k1 = _mm256_set1_epi32(int(key.key1));
  const __m256i m0 = _mm256_set1_epi32(int(kPhiloxMultiplier0)), m1 = _mm256_set1_epi32(int(kPhiloxMultiplier1));
  const __m256i w0 = _mm256_set1_epi32(int(kPhiloxKeyStep0)), w1 = _mm256_set1_epi32(int(kPhiloxKeyStep1));
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const __m256i even0 = _mm256_mul_epu32(m0, c0), odd0 = _mm256_mul_epu32(m0, _mm256_srli_epi64(c0, 32));
    const __m256i even1 = _mm256_mul_epu32(m1, c2), odd1 = _mm256_mul_epu32(m1, _mm256_srli_epi64(c2, 32));
    const __m256i lo0 = _mm256_blend_epi32(even0, _mm256_slli_epi64(odd0, 32), 0xAA);
    const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(even0, 32), odd0, 0xAA);
    const __m256i lo1 = _mm256_blend_epi32(even1, _mm256_slli_epi64(odd1, 32), 0xAA);
    const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(even1, 32), odd1, 0xAA);
    const __m256i next0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), k0);
    const __m256i next2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), k1);
    c0 = next0;
    c1 = lo1;
    c2 = next2;
    c3 = lo0;
    k0 = _mm256_add_epi32(k0, w0);
    k1 = _mm256_add_epi32(k1, w1);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[0]), c0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[1]), c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[2]), c2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[3]), c3);
}

bool cpu_has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#endif

}  // namespace

void generate_bf16_run(const GeneratorKey& key, const ResolvedDistribution& dist, std::uint64_t first_index,
                       std::int64_t count, bf16_bits* out) {
  std::int64_t i = 0;
#if defined(__x86_64__)
  if (dist.kind != DistributionKind::constant && cpu_has_avx2()) {
    std::uint32_t bits[4][kLanes];
    for (; i + kLanes <= count; i += kLanes) {
      philox_lanes(key, first_index + std::uint64_t(i), bits);
      for (int lane = 0; lane < kLanes; ++lane)
        out[i + lane] = bf16_from_random_bits(dist, first_index + std::uint64_t(i + lane),
                                              Philox4x32{{bits[0][lane], bits[1][lane], bits[2][lane], bits[3][lane]}});
    }
  }
#endif
  for (; i < count; ++i) out[i] = generate_bf16(key, dist, first_index + std::uint64_t(i));
}

}  // namespace attnres
