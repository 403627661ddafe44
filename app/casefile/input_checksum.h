// Input checksums: a sum (mod 2^64) over a tensor's logical elements of a 64-bit mix of each
// element's row-major index and bits. Order-free, so host threads and device reductions compute
// it in pieces and agree; position-bound, so moved or changed elements change it.
#pragma once
#include <cstdint>

#include "kernels/common/bf16.h"

namespace attnres {

// The splitmix64 finaliser over (index, bits).
ATTNRES_HD std::uint64_t checksum_term(std::uint64_t index, bf16_bits bits) {
  std::uint64_t z = ((index << 16) | bits) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace attnres
