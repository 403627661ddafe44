// bf16 as raw bits, shared by host code and CUDA kernels so that every path rounds
// the same way (round-to-nearest-even, NaN kept quiet).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ATTNRES_HD __host__ __device__ __forceinline__
#else
#define ATTNRES_HD inline
#endif

namespace attnres {

using bf16_bits = std::uint16_t;

ATTNRES_HD std::uint32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

ATTNRES_HD float bits_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

ATTNRES_HD float bf16_to_float(bf16_bits value) { return bits_float(std::uint32_t(value) << 16); }

ATTNRES_HD bf16_bits float_to_bf16(float value) {
  std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16_bits((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16_bits(bits >> 16);
}

// Written into row padding and guard regions: finite on purpose, so a kernel that reads
// padding as data produces a silent wrong answer (the real bug's symptom), not a NaN.
constexpr bf16_bits kCanaryBits = 0x40a5;  // 5.15625
// Written over the whole output before a launch; an element still holding it was never written.
constexpr bf16_bits kPoisonBits = 0x7fc1;  // a quiet NaN with a payload
// The output before a second call: finite, so that a kernel that reads its output before writing
// it (fmaxf(NaN, x) is x) gives other bits than after the NaN poison. Logical element i holds
// +1e30 where i is even and -1e30 where it is odd, so that neither a max nor a min absorbs it.
constexpr bf16_bits kFinitePoisonBits[2] = {0x714a, 0xf14a};

}  // namespace attnres
