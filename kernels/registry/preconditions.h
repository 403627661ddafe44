// What a kernel declares it refuses, as data: a condition on the problem, whether the kernel may
// or must refuse there, and the exact message it refuses with. A problem no rule covers must be
// computed. Whether a case must be refused is a property of the kernel, not of the case: vLLM's
// op must refuse rows that are not densely packed, vLLM's dispatch and FlashInfer's API must
// compute them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/problem.h"

namespace attnres {

enum class RefusalCondition {
  rows_not_dense,          // prefix, delta or output row stride != H
  block_write,             // block_write_idx >= 0
  hidden_not_multiple_of,  // H % value != 0
  hidden_above,            // H > value
  num_blocks_above,        // num_blocks > value
  tokens_above,            // T > value
  unaligned_operands,      // an operand's start or a row or block stride not a multiple of 16 bytes
};

// Whether a refusal is allowed (the kernel may also compute the problem correctly) or required
// (computing it means the guard is missing).
enum class RefusalMode { may, must };

struct RefusalRule {
  RefusalCondition when = RefusalCondition::rows_not_dense;
  std::int64_t value = 0;  // the bound of the conditions that take one
  RefusalMode mode = RefusalMode::must;
  // The message, with {prefix}, {delta}, {output} (row strides; {delta} "none" without delta), {H},
  // {T} and {num_blocks} filled in; empty: any message.
  std::string message;
};

struct KernelPreconditions {
  std::string source;  // where the declaration comes from: "built-in native kernel", "preset vllm-op", a file
  std::vector<RefusalRule> refusals;
};

// The rule names and takes-a-value flags, as profiles spell them ("rows_not_dense", ...).
const char* to_string(RefusalCondition condition);
std::optional<RefusalCondition> refusal_condition_named(const std::string& name);
// Every condition's name, in declaration order ("rows_not_dense, block_write, ...").
std::string refusal_condition_names();
bool takes_value(RefusalCondition condition);
const char* to_string(RefusalMode mode);

bool condition_holds(const RefusalRule& rule, const AttnResShape& shape, const AttnResStrides& strides);
// The first rule whose condition the problem meets.
const RefusalRule* applicable_refusal(const KernelPreconditions& preconditions, const AttnResShape& shape,
                                      const AttnResStrides& strides);
// The rule's message for this problem; throws std::invalid_argument for a template fmt cannot
// format (an unknown placeholder).
std::string refusal_message(const RefusalRule& rule, const AttnResShape& shape, const AttnResStrides& strides);
// "must refuse where rows_not_dense", "may refuse where hidden_above 16384".
std::string describe(const RefusalRule& rule);

// The Kimi K3 op's guard: it must refuse rows that are not densely packed, with this message.
extern const char* const kDenseRowsMessage;
RefusalRule dense_rows_rule();

// The built-in kernels' declarations: the native kernel's guard; the portable kernel computes
// every layout.
KernelPreconditions native_preconditions();
KernelPreconditions portable_preconditions();

// The declaration behind a dispatcher's choice: the native kernel's, also where the portable
// kernel replays the native kernel's hard-coded row stride in its place; else the portable one's.
KernelPreconditions dispatched_preconditions(bool native_path, bool hard_coded_row_stride);

// The presets for the entry points users gate (docs/plugins.md): "vllm-op" (the op refuses
// non-dense rows with the exact message), "vllm-dispatch" and "flashinfer" (compute every layout).
std::optional<KernelPreconditions> preset_preconditions(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace attnres
