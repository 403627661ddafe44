// The input generator on the host, for a run of consecutive element indices: the bits of
// generate_bf16 (kernels/philox.h), with the Philox rounds of eight elements at a time in AVX2
// lanes where the CPU has them.
#pragma once
#include <cstdint>

#include "kernels/philox.h"

namespace attnres {

// out[i] = generate_bf16(key, dist, first_index + i) for i in [0, count).
void generate_bf16_run(const GeneratorKey& key, const ResolvedDistribution& dist, std::uint64_t first_index,
                       std::int64_t count, bf16_bits* out);

// Whether generate_bf16_run uses the AVX2 lanes on this CPU.
bool host_generator_uses_avx2();

}  // namespace attnres
