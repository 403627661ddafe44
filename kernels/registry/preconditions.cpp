#include "kernels/registry/preconditions.h"

#include <stdexcept>

#include <fmt/format.h>

namespace attnres {
namespace {

struct ConditionName {
  RefusalCondition condition;
  const char* name;
  bool takes_value;
};

constexpr ConditionName kConditions[] = {
    {RefusalCondition::rows_not_dense, "rows_not_dense", false},
    {RefusalCondition::block_write, "block_write", false},
    {RefusalCondition::hidden_not_multiple_of, "hidden_not_multiple_of", true},
    {RefusalCondition::hidden_above, "hidden_above", true},
    {RefusalCondition::num_blocks_above, "num_blocks_above", true},
    {RefusalCondition::tokens_above, "tokens_above", true},
    {RefusalCondition::unaligned_operands, "unaligned_operands", false},
};

const ConditionName& entry(RefusalCondition condition) {
  for (const ConditionName& c : kConditions)
    if (c.condition == condition) return c;
  throw std::logic_error("unnamed refusal condition");
}

bool rows_dense(const AttnResShape& shape, const AttnResStrides& strides) {
  return strides.prefix == shape.hidden && (!shape.has_delta || strides.delta == shape.hidden) &&
         strides.output == shape.hidden;
}

bool operands_aligned(const AttnResShape& shape, const AttnResStrides& strides) {
  for (const std::int64_t offset : strides.storage_offset)
    if (offset % 8 != 0) return false;
  const std::int64_t delta = shape.has_delta ? strides.delta : 0;
  for (const std::int64_t stride : {strides.prefix, delta, strides.output, strides.blocks_token, strides.blocks_row})
    if (stride % 8 != 0) return false;
  return true;
}

}  // namespace

const char* const kDenseRowsMessage =
    "Kimi K3 AttnRes requires densely packed rows; got strides {prefix}, {delta}, {output} for hidden_size {H}";

const char* to_string(RefusalCondition condition) { return entry(condition).name; }

std::optional<RefusalCondition> refusal_condition_named(const std::string& name) {
  for (const ConditionName& c : kConditions)
    if (name == c.name) return c.condition;
  return std::nullopt;
}

std::string refusal_condition_names() {
  std::string names;
  for (const ConditionName& c : kConditions) names += (names.empty() ? "" : ", ") + std::string(c.name);
  return names;
}

bool takes_value(RefusalCondition condition) { return entry(condition).takes_value; }

const char* to_string(RefusalMode mode) { return mode == RefusalMode::must ? "must" : "may"; }

bool condition_holds(const RefusalRule& rule, const AttnResShape& shape, const AttnResStrides& strides) {
  switch (rule.when) {
    case RefusalCondition::rows_not_dense: return !rows_dense(shape, strides);
    case RefusalCondition::block_write: return shape.block_write_idx >= 0;
    case RefusalCondition::hidden_not_multiple_of: return rule.value > 0 && shape.hidden % rule.value != 0;
    case RefusalCondition::hidden_above: return shape.hidden > rule.value;
    case RefusalCondition::num_blocks_above: return shape.num_blocks > rule.value;
    case RefusalCondition::tokens_above: return shape.tokens > rule.value;
    case RefusalCondition::unaligned_operands: return !operands_aligned(shape, strides);
  }
  return false;
}

const RefusalRule* applicable_refusal(const KernelPreconditions& preconditions, const AttnResShape& shape,
                                      const AttnResStrides& strides) {
  for (const RefusalRule& rule : preconditions.refusals)
    if (condition_holds(rule, shape, strides)) return &rule;
  return nullptr;
}

std::string refusal_message(const RefusalRule& rule, const AttnResShape& shape, const AttnResStrides& strides) {
  const std::string delta = shape.has_delta ? std::to_string(strides.delta) : std::string("none");
  try {
    return fmt::format(fmt::runtime(rule.message), fmt::arg("prefix", strides.prefix), fmt::arg("delta", delta),
                       fmt::arg("output", strides.output), fmt::arg("H", shape.hidden), fmt::arg("T", shape.tokens),
                       fmt::arg("num_blocks", shape.num_blocks));
  } catch (const fmt::format_error& e) {
    throw std::invalid_argument(
        fmt::format("message \"{}\" cannot be filled in ({}); it may name {{prefix}}, {{delta}}, "
                    "{{output}}, {{H}}, {{T}} and {{num_blocks}}, and writes a brace as {{{{ or }}}}",
                    rule.message, e.what()));
  }
}

std::string describe(const RefusalRule& rule) {
  std::string text = fmt::format("{} refuse where {}", to_string(rule.mode), to_string(rule.when));
  if (takes_value(rule.when)) text += fmt::format(" {}", rule.value);
  return text;
}

RefusalRule dense_rows_rule() {
  return RefusalRule{RefusalCondition::rows_not_dense, 0, RefusalMode::must, kDenseRowsMessage};
}

KernelPreconditions native_preconditions() { return {"the built-in native kernel", {dense_rows_rule()}}; }

KernelPreconditions portable_preconditions() { return {"the built-in portable kernel", {}}; }

KernelPreconditions dispatched_preconditions(bool native_path, bool hard_coded_row_stride) {
  return native_path || hard_coded_row_stride ? native_preconditions() : portable_preconditions();
}

std::optional<KernelPreconditions> preset_preconditions(const std::string& name) {
  if (name == "vllm-op") return KernelPreconditions{"preset vllm-op", {dense_rows_rule()}};
  if (name == "vllm-dispatch" || name == "flashinfer") return KernelPreconditions{"preset " + name, {}};
  return std::nullopt;
}

std::vector<std::string> preset_names() { return {"vllm-op", "vllm-dispatch", "flashinfer"}; }

}  // namespace attnres
