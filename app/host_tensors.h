// Host copies of a case's tensors: generated values, canaries in row padding and in guard
// regions around every allocation, a poisoned output; and the checks run after a kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/case_spec.h"
#include "kernels/problem.h"

namespace attnres {

// Elements of canary before and after every allocation: 256 bytes keeps each tensor's data
// as aligned as the allocation itself.
constexpr std::int64_t kGuardElements = 128;

struct HostTensor {
  std::string name;
  std::int64_t rows = 0;        // blocks: T * max_blocks rows, row t*max_blocks+b
  std::int64_t columns = 0;     // logical elements per row (H)
  std::int64_t row_stride = 0;  // elements between rows, >= columns
  std::vector<bf16_bits> storage;  // guard, rows * row_stride, guard

  bool empty() const { return rows == 0; }
  std::int64_t span() const { return rows * row_stride; }
  bf16_bits* data() { return storage.data() + kGuardElements; }
  const bf16_bits* data() const { return storage.data() + kGuardElements; }
  bf16_bits& at(std::int64_t row, std::int64_t col) { return data()[row * row_stride + col]; }
  bf16_bits at(std::int64_t row, std::int64_t col) const { return data()[row * row_stride + col]; }
};

// All allocations every filled with canaries; `fill` sets the logical elements.
HostTensor make_tensor(std::string name, std::int64_t rows, std::int64_t columns, std::int64_t row_stride);

struct CaseTensors {
  HostTensor prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, output;
  // The case's one layout (CaseSpec::strides(): the dispatcher reads the same), every tensor
  // above allocated by it.
  AttnResShape shape;
  AttnResStrides strides;

  std::vector<HostTensor*> all();
  std::vector<const HostTensor*> all() const;
  // Shape and strides with null pointers: the layout any copy of these tensors shares.
  AttnResArgs layout() const;
  // Host pointers and strides, ready for the CPU reference and CPU kernels.
  AttnResArgs args();
};

// Tensors laid out by `shape` and `strides`, every allocation filled with canaries and the
// output's elements with poison: the inputs' elements are left for a generator (or a replayed
// file) to fill.
CaseTensors allocate_case_tensors(const AttnResShape& shape, const AttnResStrides& strides);

// The tensors whose elements the generator fills, and which stream of it each one takes.
struct GeneratedTensor {
  HostTensor* tensor;
  InputTensor which;
};
std::vector<GeneratedTensor> generated_tensors(CaseTensors& tensors);

// Generated inputs (seeded, deterministic, on every core), canaries, and an output full of
// poison. A CUDA backend makes the same bits on the device (Backend::make_inputs).
CaseTensors make_case_tensors(const CaseSpec& spec);

// FNV-1a 64 over bf16 bits, low byte first.
class Fnv1a64 {
 public:
  void add(bf16_bits bits) {
    hash_ = (hash_ ^ (bits & 0xffu)) * 1099511628211ull;
    hash_ = (hash_ ^ (bits >> 8)) * 1099511628211ull;
  }
  std::string text() const;  // "fnv1a64:<16 hex digits>"

 private:
  std::uint64_t hash_ = 1469598103934665603ull;
};

// FNV-1a 64 over the logical elements' bf16 bits, row by row: independent of padding.
std::string checksum(const HostTensor& tensor);

// Bytes of host storage (guards and padding included) of one copy of a case's seven
// tensors as make_case_tensors lays them out; nothing when the sizes overflow int64.
std::optional<std::int64_t> case_storage_bytes(const AttnResShape& shape, const AttnResStrides& strides);

// What prefix and blocks must hold after a correct run (the reference's own steps 1-2),
// padding and guards untouched; the other inputs must equal their originals, the output's
// padding and guards likewise. The CPU reference leaves the same in the buffers it runs on.
CaseTensors expected_after_run(const CaseTensors& before);

struct Violation {
  std::string tensor;
  std::string kind;  // e.g. "padding canary overwritten"
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

ExactnessReport check_after_run(const CaseTensors& after, const CaseTensors& expected);

}  // namespace attnres
