#!/usr/bin/env python3
# The ring's per-row timeline probe (docs/design/native-kernel.md, "What the stamps left open"). Run from
# the root of a copy of the tree (never on the tree you commit): it patches kernels/native/native_sm90.cu
# and app/bench/run_bench.cpp so that, under ATTNRES_STAMPS=1, `attnres-check bench` prints after each ring
# point the median over CTAs (and p10-p90) of, per row r < 4 of a CTA, in µs from the first CTA's
# start: the producer issuing the row's first copy (P0) and its last (P1); consumer thread 0 seeing
# the prefix land (C0), ending pass 1 (C1), having the reduction (C2), ending pass 2 (C3).
from source_patch import SourcePatch

source = SourcePatch('kernels/native/native_sm90.cu')
source.replace("""namespace attnres {
namespace {
""","""namespace attnres {
__device__ unsigned long long g_timeline[1024][4][7];  // [cta][row][start, P0, P1, C0, C1, C2, C3]
namespace {
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
""")
source.replace("""  native_device::allow_dependent_launch();

  if (threadIdx.x >= consumer_threads) {  // producer warp""","""  native_device::allow_dependent_launch();
  if (threadIdx.x == 0) g_timeline[blockIdx.x][0][0] = global_ns();

  if (threadIdx.x >= consumer_threads) {  // producer warp""")
source.replace("""      for (int j = 0; j < plan.loads; ++j) {
        mbar_wait(&empty[stage], phase ^ 1u);  // a fresh barrier counts as released""","""      const int trow = int((t - blockIdx.x) / gridDim.x);
      for (int j = 0; j < plan.loads; ++j) {
        mbar_wait(&empty[stage], phase ^ 1u);  // a fresh barrier counts as released
        if (lane == 0 && j == 0 && trow < 4) g_timeline[blockIdx.x][trow][1] = global_ns();""")
source.replace("""        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    if (vector_copies)""","""        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
        if (lane == 0 && j == plan.loads - 1 && trow < 4) g_timeline[blockIdx.x][trow][2] = global_ns();
      }
    }
    if (vector_copies)""")
source.replace("""      mbar_wait(&full[stage], phase);
      const int prefix_stage = stage;""","""      mbar_wait(&full[stage], phase);
      const int trow = int((t - blockIdx.x) / gridDim.x);
      if (c == 0 && trow < 4) g_timeline[blockIdx.x][trow][3] = global_ns();
      const int prefix_stage = stage;""")
source.replace("""    // Step 4: one reduction for every source's logit of every row and the stashed rows' norms.
    carry_pending_norms(sums);
    const float total = cta_sum(sums, scratch[buffer], consumer_warps, consumer_threads);""","""    const int it = int((first - blockIdx.x) / gridDim.x);
    if (c == 0 && kRows == 1 && it < 4) g_timeline[blockIdx.x][it][4] = global_ns();
    // Step 4: one reduction for every source's logit of every row and the stashed rows' norms.
    carry_pending_norms(sums);
    const float total = cta_sum(sums, scratch[buffer], consumer_warps, consumer_threads);
    if (c == 0 && kRows == 1 && it < 4) g_timeline[blockIdx.x][it][5] = global_ns();""")
source.replace("""      pending_row[r] = row[r];
    }
  }""","""      pending_row[r] = row[r];
    }
    if (c == 0 && kRows == 1 && it < 4) g_timeline[blockIdx.x][it][6] = global_ns();
  }""")
source.replace("""void launch_native(const AttnResArgs& args, const NativeLaunchOptions& options, cudaStream_t stream) {""","""void print_native_timeline(std::int64_t tokens, int grid) {
  static unsigned long long host[1024][4][7];
  ATTNRES_CUDA_CHECK(cudaDeviceSynchronize());
  ATTNRES_CUDA_CHECK(cudaMemcpyFromSymbol(host, g_timeline, sizeof(host)));
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < grid; ++b) t0 = std::min(t0, host[b][0][0]);
  const int rows = int(std::min<std::int64_t>(4, (tokens + grid - 1) / grid));
  std::string text = fmt::format("timeline T={} grid={} rows/CTA={} (median over CTAs, us from first start):", tokens, grid, rows);
  const char* names[7] = {"start", "P0", "P1", "C0", "C1", "C2", "C3"};
  for (int r = 0; r < rows; ++r) {
    text += fmt::format("\\n  row {}:", r);
    for (int k = (r == 0 ? 0 : 1); k < 7; ++k) {
      std::vector<double> v;
      for (int b = 0; b < grid; ++b)
        if (b + std::int64_t(r) * grid < tokens) v.push_back(double(host[b][r][k] - t0) / 1e3);
      std::sort(v.begin(), v.end());
      text += fmt::format(" {} {:.2f} ({:.2f}-{:.2f})", names[k], v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10]);
    }
  }
  std::fprintf(stderr, "%s\\n", text.c_str());
}

void launch_native(const AttnResArgs& args, const NativeLaunchOptions& options, cudaStream_t stream) {""")
source.replace("#include <algorithm>\n","#include <algorithm>\n#include <cstdio>\n#include <vector>\n")
source.save()
source = SourcePatch('app/bench/run_bench.cpp')
source.replace("""        point.native.measured = measure(entry_launcher("native"));
""","""        point.native.measured = measure(entry_launcher("native"));
        if (std::getenv("ATTNRES_STAMPS") && chosen.variant != native::Variant::split) {
          int sms = 0;
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
          print_native_timeline(tokens, int(native::ring_grid(tokens, sms)));
        }
""")
source.replace("namespace attnres {\n","namespace attnres {\nvoid print_native_timeline(std::int64_t tokens, int grid);\n")
source.replace("#include <memory>\n","#include <cstdlib>\n#include <memory>\n")
source.save()
