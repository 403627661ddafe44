// Host copies of a case's tensors: generated values, canaries in row padding and in guard
// regions around every allocation, a poisoned output; and the checks run after a kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/casefile/case_layout.h"
#include "app/casefile/case_spec.h"
#include "kernels/common/problem.h"

namespace attnres {

struct HostTensor : TensorLayout {
  std::vector<bf16_bits> storage;  // guard, span(), guard

  // The storage's start (after the guard) and the first logical element.
  bf16_bits* base() { return storage.data() + guard(); }
  const bf16_bits* base() const { return storage.data() + guard(); }
  bf16_bits* data() { return base() + offset; }
  const bf16_bits* data() const { return base() + offset; }
  bf16_bits* row(std::int64_t r) { return data() + row_start(r); }
  const bf16_bits* row(std::int64_t r) const { return data() + row_start(r); }
  bf16_bits& at(std::int64_t r, std::int64_t col) { return row(r)[col]; }
  bf16_bits at(std::int64_t r, std::int64_t col) const { return row(r)[col]; }
};

// Every element of the allocation a canary.
HostTensor make_tensor(const TensorLayout& layout);

struct CaseTensors {
  HostTensor prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, output;
  // The case's one layout (CaseSpec::strides: the dispatcher reads the same), every tensor
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

// FNV-1a 64 over bf16 bits, low byte first: the checksum of input files written before
// mix64sum, still verified by name.
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

// "mix64sum:<16 hex digits>" (app/casefile/input_checksum.h).
std::string checksum_text(std::uint64_t sum);
// The mix64sum checksum of the logical elements, independent of padding, on every core.
std::string checksum(const HostTensor& tensor);
// (name, checksum) of each input present (not the output), in CaseTensors::all() order.
std::vector<std::pair<std::string, std::string>> input_checksums(const CaseTensors& tensors);

// Bytes of storage (guards and padding included) of one copy of a case's seven tensors;
// nothing when the sizes overflow int64.
std::optional<std::int64_t> case_storage_bytes(const AttnResShape& shape, const AttnResStrides& strides);

}  // namespace attnres
