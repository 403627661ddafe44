#include "kernels/native/native_plan.h"

#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "kernels/native/native_limits.h"

namespace attnres::native {

std::string to_string(const Plan& plan) {
  if (plan.variant == Variant::ring) return "ring";
  if (plan.variant == Variant::ring_cp_async) return "ring/cp.async";
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
  if (plan.variant != Variant::split) return std::nullopt;
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
  std::vector<Plan> plans{Plan{}, Plan{Variant::ring_cp_async}};
  for (int cluster = 1; cluster <= kSplitMaxCluster; cluster *= 2)
    for (int vectors = 1; vectors <= kSplitMaxVectorsPerThread; ++vectors) {
      const Plan plan{Variant::split, cluster, vectors};
      if (!plan_unsupported_reason(plan, hidden)) plans.push_back(plan);
    }
  return plans;
}

namespace {

// Measured on the H200 (docs/design/native-kernel.md, `bench --native-plans`): the first row whose
// bounds hold the problem gives the plan; past the last, the ring. Up to 16 rows a cluster of 8
// fetches a row with 8 SMs at once; from 32 rows on, fewer CTAs per row win; from ~96 rows with 8
// blocks, ~128-192 with 4 and ~320 with 2, the ring's pipelining across rows beats one round trip
// per row; with one block, one row per CTA wins at every T, two CTAs to an SM (those bounds were
// measured at H=7168). At small H the ring's one CTA per SM has too
// few threads (H/16 + 32) to keep the loads in flight, and one row per CTA wins at every T:
// 1.5-4.4x at H <= 2048, 1.1-1.3x at 3072 with up to 4 blocks, up to 1.14x at 4096 with one
// (at 3072 with 8 blocks and at 4096 with more than one, the ring). At H=7168 the ring's
// producer copies by cp.async with 1-8 blocks, where that measured 1-11 % faster than bulk copies;
// with 0 blocks, and at H=2048 to 5120 with any count, its bulk copies win or tie
// (docs/design/native-kernel.md has the measurements).
struct PolicyRow {
  std::int64_t max_tokens;
  int min_blocks, max_blocks;
  int min_hidden, max_hidden;
  Plan plan;
};
constexpr std::int64_t kAnyTokens = std::numeric_limits<std::int64_t>::max();
// A split grid is tokens x cluster CTAs: past this the ring takes any size.
constexpr std::int64_t kSplitGridTokens = std::numeric_limits<int>::max() / kSplitMaxCluster;
constexpr int kAnyHidden = kMaxHidden;
constexpr int kKimiK3Hidden = 7168;
constexpr Plan kRingCpAsync{Variant::ring_cp_async};
constexpr PolicyRow kPolicy[] = {
    {16, 0, kMaxBlocks, 0, kAnyHidden, {Variant::split, 8, 1}},
    {32, 0, 4, 0, kAnyHidden, {Variant::split, 4, 2}},
    {32, 0, kMaxBlocks, 0, kAnyHidden, {Variant::split, 8, 1}},
    {64, 0, 4, 0, kAnyHidden, {Variant::split, 2, 2}},
    // One row per CTA, measured on an H100 at H=7168 against every plan: with 5 blocks from T=33
    // (T=64 7.3 µs against split/2x1's 7.8, T=128 9.4 against the ring's 11.0), with 1 block at
    // every T from 65 on (two CTAs share an SM; T=4096 102 µs against the ring's 112-119), with 2
    // blocks up to T=320, with 3-4 up to T=128. The 5-block row comes before the T <= 64 row below,
    // which would otherwise take it.
    {128, 5, 5, kKimiK3Hidden, kKimiK3Hidden, {Variant::split, 1, 2}},
    {64, 0, kMaxBlocks, 0, kAnyHidden, {Variant::split, 2, 1}},
    {kSplitGridTokens, 1, 1, kKimiK3Hidden, kKimiK3Hidden, {Variant::split, 1, 2}},
    {320, 2, 2, kKimiK3Hidden, kKimiK3Hidden, {Variant::split, 1, 2}},
    {128, 3, 4, kKimiK3Hidden, kKimiK3Hidden, {Variant::split, 1, 2}},
    // 6-8 blocks from T=65 to 128, once every load was issued first (s19; H100): T=96 9.4-11.2 µs
    // against ring/cp.async's 10.2-12.1, T=128 10.6-13.0 against 11.8-13.9; at T=192 the ring wins.
    {128, 6, 8, kKimiK3Hidden, kKimiK3Hidden, {Variant::split, 1, 2}},
    {128, 0, 2, 0, kAnyHidden, {Variant::split, 1, 2}},
    {192, 0, 4, 0, kAnyHidden, {Variant::split, 2, 2}},
    {512, 0, 1, 0, kAnyHidden, {Variant::split, 2, 2}},
    // One vector per thread from 6 sources on: measured faster while split/Cx2 spilled there, not since
    // (docs/design/native-kernel.md, s14 and s19).
    {kSplitGridTokens, 0, 4, 0, 2048, {Variant::split, 1, 2}},
    {kSplitGridTokens, 5, kMaxBlocks, 0, 2048, {Variant::split, 1, 1}},
    {kSplitGridTokens, 0, 1, 2560, 3072, {Variant::split, 1, 2}},
    {kSplitGridTokens, 2, 4, 2560, 3072, {Variant::split, 2, 2}},
    {kSplitGridTokens, 0, 1, 3584, 4096, {Variant::split, 2, 2}},
    // 1 block past the split grid: cp.async lost 2-3 % at T=1024, won 5-11 % from 4096 on (H200).
    {kAnyTokens, 1, 1, kKimiK3Hidden, kKimiK3Hidden, kRingCpAsync},
    // 2-8 blocks: 1-9 % faster than bulk copies from T=320 on; at 3 blocks the one-row iteration
    // it gets is 5-8 % faster than paired rows' bulk copies.
    {kAnyTokens, 2, 8, kKimiK3Hidden, kKimiK3Hidden, kRingCpAsync},
};

// The first policy row that holds the problem; nullptr past the last (the ring).
const PolicyRow* policy_row(std::int64_t tokens, int num_blocks, int hidden) {
  for (const PolicyRow& row : kPolicy)
    if (tokens <= row.max_tokens && num_blocks >= row.min_blocks && num_blocks <= row.max_blocks &&
        hidden >= row.min_hidden && hidden <= row.max_hidden)
      return &row;
  return nullptr;
}

}  // namespace

std::int64_t ring_grid(std::int64_t tokens, int sms) {
  const std::int64_t rows_per_cta = (tokens + sms - 1) / sms;
  return (tokens + rows_per_cta - 1) / rows_per_cta;
}

Plan choose_plan(std::int64_t tokens, int num_blocks, int hidden) {
  const PolicyRow* row = policy_row(tokens, num_blocks, hidden);
  return !row || plan_unsupported_reason(row->plan, hidden) ? Plan{} : row->plan;
}

std::vector<std::int64_t> plan_token_bounds(int num_blocks, int hidden) {
  std::vector<std::int64_t> bounds;
  for (std::int64_t tokens = 1; tokens < kSplitGridTokens;) {
    // The row that holds (tokens, ...) ends at its max_tokens: the next plan starts past it.
    const PolicyRow* row = policy_row(tokens, num_blocks, hidden);
    const std::int64_t end = row ? row->max_tokens : kSplitGridTokens;
    if (end >= kSplitGridTokens) break;
    if (!(choose_plan(end + 1, num_blocks, hidden) == choose_plan(tokens, num_blocks, hidden))) bounds.push_back(end);
    tokens = end + 1;
  }
  return bounds;
}

}  // namespace attnres::native
