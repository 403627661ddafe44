// How the native kernel lays a problem out on the GPU, and which layout it picks for each
// (tokens, num_blocks): a pure function, unit-tested like the dispatcher. docs/design/native-kernel.md
// has the measurements the table comes from.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnres::native {

enum class Variant {
  // Persistent grid, one CTA per SM walking rows, a producer warp streaming every source row
  // through a shared-memory ring by one bulk copy (cp.async.bulk) per row: the large-T kernel.
  ring,
  // The ring with the producer warp's 32 lanes copying each row by 16-byte cp.async (the
  // load/store path): measured faster only at H=7168, with 1-8 blocks.
  ring_cp_async,
  // One row per thread-block cluster of `cluster` CTAs, each taking a slice of H; every load of
  // the row issued up front into registers; partial logits and the output norm's sum of
  // squares exchanged through distributed shared memory (a one-CTA row launches without a
  // cluster and exchanges through its own): the small-T kernel, and at H=7168 with one block
  // the kernel at every T.
  split,
};

struct Plan {
  Variant variant = Variant::ring;
  int cluster = 1;             // split: CTAs per row
  int vectors_per_thread = 1;  // split: 16-byte vectors of each source a thread loads
  bool operator==(const Plan& other) const {
    return variant == other.variant && cluster == other.cluster && vectors_per_thread == other.vectors_per_thread;
  }
};

// "ring", "ring/cp.async", "split/8x1" (cluster of 8, one vector per thread).
std::string to_string(const Plan& plan);

constexpr int kSplitMaxThreads = 512;
constexpr int kSplitMaxCluster = 8;  // the portable limit (16 measured no faster at T=1: docs/design/native-kernel.md)
constexpr int kSplitMaxVectorsPerThread = 2;

// Threads per CTA of a split plan: the slice's vectors over vectors_per_thread, rounded up to
// whole warps (the threads past the slice take part in the reductions with zeros).
int split_threads(const Plan& plan, int hidden);
// Warps of every CTA of a row together: the partials each CTA sums (at most 32).
int split_slots(const Plan& plan, int hidden);

// Why `plan` cannot run this hidden size (one the native kernel supports), if it cannot.
std::optional<std::string> plan_unsupported_reason(const Plan& plan, int hidden);

// Every plan that can run this hidden size: both rings and each legal split.
std::vector<Plan> all_plans(int hidden);

// The plan the native kernel launches.
Plan choose_plan(std::int64_t tokens, int num_blocks, int hidden);

// The token counts past which choose_plan picks another plan for this many blocks and this H, in
// increasing order: a row's bits may change across each.
std::vector<std::int64_t> plan_token_bounds(int num_blocks, int hidden);

// CTAs of the ring's persistent grid for `tokens` >= 1 rows on `sms` SMs: as few as give every CTA
// the same number of rows, ceil(tokens / sms), so no CTA finishes a row alone after the others
// (T=4096 on 132 SMs: 128 CTAs of 32 rows, not 4 CTAs doing a 32nd row after 128 have done 31).
std::int64_t ring_grid(std::int64_t tokens, int sms);

// How the ring variant lays out its shared memory on a device with `sms` SMs and
// `shared_optin_bytes` per block (cudaDevAttrMaxSharedMemoryPerBlockOptin): rows per iteration (two
// rows share one CTA-wide reduction where a row has at most 4 sources, both rows' stages and
// stashed mixes fit with 3 stages to spare, and a CTA gets more than one row) and ring stages.
// Each row's mix is stashed in shared memory so that its output norm rides on the next reduction.
struct RingLayout {
  int rows_per_iteration = 1;
  int stages = 0;
};
// nullopt where one row's loads do not fit the ring. Defined with the ring (kernels/native/native_sm90.cu).
std::optional<RingLayout> ring_layout(std::int64_t tokens, int num_blocks, bool has_delta, int hidden, int sms,
                                      int shared_optin_bytes);

}  // namespace attnres::native
