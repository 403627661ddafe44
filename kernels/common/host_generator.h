// The input generator on the host, for a run of consecutive element indices: the bits of
// generate_bf16 (kernels/common/philox.h), with the Philox rounds of eight elements at a time in AVX2
// lanes on an x86-64 CPU that has them (checked at run time), one at a time elsewhere.
#pragma once
#include <cstdint>

#include "kernels/common/philox.h"

namespace attnres {

// out[i] = generate_bf16(key, dist, first_index + i) for i in [0, count).
void generate_bf16_run(const GeneratorKey& key, const ResolvedDistribution& dist, std::uint64_t first_index,
                       std::int64_t count, bf16_bits* out);

}  // namespace attnres
