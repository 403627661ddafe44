// The mutants as registry entries, for the host and for a CUDA device.
#include <fmt/format.h>

#include "kernels/common/parallel.h"
#include "kernels/mutants/mutant_entries.h"
#include "kernels/mutants/mutant_kernel.h"

namespace attnres {

const std::vector<MutationInfo>& mutations() {
  static const std::vector<MutationInfo> all = {
      {Mutation::no_key_rms_norm, "no-key-rms-norm", "logits without the keys' rsqrt(mean(v^2) + eps)"},
      {Mutation::no_norm_weight, "no-norm-weight", "logits from qk_weight alone, norm_weight dropped"},
      {Mutation::no_output_norm_weight, "no-output-norm-weight",
       "output normalised but not multiplied by output_norm_weight"},
      {Mutation::softmax_without_max, "softmax-without-max", "exp(logit) without subtracting the largest logit"},
      {Mutation::p_not_rounded, "p-not-rounded",
       "p = prefix + delta kept in float32 as a source, stored by truncation"},
      {Mutation::delta_ignored, "delta-ignored", "p = prefix, delta never added"},
      {Mutation::source_off_by_one, "source-off-by-one", "the last block source left out of the softmax"},
      {Mutation::wrong_write_index, "wrong-write-index",
       "p written into block block_write_idx + 1 (or - 1 at the end)"},
      {Mutation::prefix_not_written, "prefix-not-written", "p never written back into prefix"},
      {Mutation::hard_coded_row_stride, "hard-coded-row-stride",
       "the seed's bug: prefix, delta and output rows taken as H apart"},
      {Mutation::float16_rounding, "float16-rounding",
       "p and the output rounded through float16 instead of straight to bf16"},
      {Mutation::eps_ignored, "eps-ignored", "eps and output_norm_eps taken as 0"},
      {Mutation::eps_swapped, "eps-swapped", "eps used for the output norm and output_norm_eps for the keys"},
      {Mutation::p_flushed_to_zero, "p-flushed-to-zero",
       "a denormal p written and used as 0, as flush-to-zero arithmetic does"},
      {Mutation::tokens_past_65535_skipped, "tokens-past-65535-skipped",
       "rows from 65535 on never computed, as with tokens on grid.y"},
      {Mutation::output_biased, "output-biased", "0.07 added to every output element, inside the tolerance"},
  };
  return all;
}

std::string mutant_kernel_name(Mutation mutation) {
  if (mutation == Mutation::none) return "mutant:none";
  for (const MutationInfo& m : mutations())
    if (m.mutation == mutation) return fmt::format("mutant:{}", m.name);
  return "mutant:?";
}

void mutant_kernel_host(const AttnResArgs& args, Mutation mutation) {
  parallel_for(args.shape.tokens, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) mutant_token(args, mutation, t);
  });
}

namespace {

class MutantEntry : public KernelEntry {
 public:
  MutantEntry(Mutation mutation, OperandPlace place) : mutation_(mutation), place_(place) {}
  std::string name() const override { return mutant_kernel_name(mutation_); }
  OperandPlace operands() const override { return place_; }
  std::optional<Unsupported> cannot_implement(const AttnResShape&, const AttnResStrides&,
                                              const DeviceDescription&) const override {
    return std::nullopt;
  }
  // Mutated from a kernel that takes every layout.
  KernelPreconditions preconditions() const override { return {"a mutant of a kernel that computes every layout", {}}; }
  void launch(const AttnResArgs& args, const LaunchOptions&, cudaStream_t stream) override {
    if (place_ == OperandPlace::host)
      mutant_kernel_host(args, mutation_);
    else
      mutant_kernel_device(args, mutation_, stream);
  }

 private:
  Mutation mutation_;
  OperandPlace place_;
};

}  // namespace

std::vector<std::unique_ptr<KernelEntry>> make_mutant_entries(OperandPlace place) {
  std::vector<std::unique_ptr<KernelEntry>> entries;
  entries.push_back(std::make_unique<MutantEntry>(Mutation::none, place));
  for (const MutationInfo& m : mutations()) entries.push_back(std::make_unique<MutantEntry>(m.mutation, place));
  return entries;
}

}  // namespace attnres
