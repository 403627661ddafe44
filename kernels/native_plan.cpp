#include "kernels/native_plan.h"

#include <fmt/format.h>

#include "kernels/native_limits.h"

namespace attnres::native {

std::string to_string(const Plan& plan) {
  if (plan.variant == Variant::ring) return "ring";
  return fmt::format("split/{}x{}", plan.cluster, plan.vectors_per_thread);
}

namespace {

int slice_vectors(const Plan& plan, int hidden) { return hidden / kElementsPerVector / plan.cluster; }

}  // namespace

int split_threads(const Plan& plan, int hidden) {
  const int owners = slice_vectors(plan, hidden) / plan.vectors_per_thread;
  return (owners + 31) / 32 * 32;
}

int split_slots(const Plan& plan, int hidden) { return plan.cluster * split_threads(plan, hidden) / 32; }

std::optional<std::string> plan_unsupported_reason(const Plan& plan, int hidden) {
  if (plan.variant == Variant::ring) return std::nullopt;
  if (plan.cluster < 1 || plan.cluster > kSplitMaxCluster || (plan.cluster & (plan.cluster - 1)) != 0)
    return fmt::format("split clusters are 1, 2, 4 or 8 CTAs, got {}", plan.cluster);
  if (plan.vectors_per_thread < 1 || plan.vectors_per_thread > kSplitMaxVectorsPerThread)
    return fmt::format("split threads load 1 or 2 vectors per source, got {}", plan.vectors_per_thread);
  const int vectors = hidden / kElementsPerVector;
  if (vectors % (plan.cluster * plan.vectors_per_thread) != 0)
    return fmt::format("{}: hidden_size {} does not split evenly", to_string(plan), hidden);
  if (split_threads(plan, hidden) > kSplitMaxThreads)
    return fmt::format("{}: hidden_size {} needs {} threads per CTA, more than {}", to_string(plan), hidden,
                       split_threads(plan, hidden), kSplitMaxThreads);
  if (split_slots(plan, hidden) > 32)
    return fmt::format("{}: hidden_size {} gives {} warps per row, more than 32", to_string(plan), hidden,
                       split_slots(plan, hidden));
  return std::nullopt;
}

std::vector<Plan> all_plans(int hidden) {
  std::vector<Plan> plans{Plan{}};
  for (int cluster = 1; cluster <= kSplitMaxCluster; cluster *= 2)
    for (int vectors = 1; vectors <= kSplitMaxVectorsPerThread; ++vectors) {
      const Plan plan{Variant::split, cluster, vectors};
      if (!plan_unsupported_reason(plan, hidden)) plans.push_back(plan);
    }
  return plans;
}

namespace {

// Measured on the H200 (docs/native-kernel.md, `bench --native-plans`): the first row whose
// bounds hold the problem gives the plan; past the last, the ring. Up to 16 rows a cluster of 8
// fetches a row with 8 SMs at once; from 32 rows on, fewer CTAs per row win; from ~96 rows with 8
// blocks, ~192 with 4 and ~512 with one, the ring's pipelining across rows beats one round trip
// per row.
struct PolicyRow {
  std::int64_t max_tokens;
  int max_blocks;
  Plan plan;
};
constexpr PolicyRow kPolicy[] = {
    {16, kMaxBlocks, {Variant::split, 8, 1}},
    {32, 4, {Variant::split, 4, 2}},
    {32, kMaxBlocks, {Variant::split, 8, 1}},
    {64, 4, {Variant::split, 2, 2}},
    {64, kMaxBlocks, {Variant::split, 2, 1}},
    {128, 2, {Variant::split, 1, 2}},
    {192, 4, {Variant::split, 2, 2}},
    {512, 1, {Variant::split, 2, 2}},
};

}  // namespace

std::int64_t ring_grid(std::int64_t tokens, int sms) {
  const std::int64_t rows_per_cta = (tokens + sms - 1) / sms;
  return (tokens + rows_per_cta - 1) / rows_per_cta;
}

Plan choose_plan(std::int64_t tokens, int num_blocks, int hidden) {
  for (const PolicyRow& row : kPolicy)
    if (tokens <= row.max_tokens && num_blocks <= row.max_blocks)
      return plan_unsupported_reason(row.plan, hidden) ? Plan{} : row.plan;
  return Plan{};
}

}  // namespace attnres::native
