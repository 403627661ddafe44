# A/B switch (not for main): ATTNRES_NO_STASH=1 gives one-row ring iterations the stash's shared
# memory as ring stages (H=7168: 15 instead of 13) and takes each row's output norm in a reduction
# of its own (warp butterfly, one named barrier) instead of riding on the next row's. v25 measured
# the unstashed layout before v26's held blocks; v26 measured it only at T >= 4096 (8 blocks equal
# at 4096, 1 % slower at 16384). Question: at T = 192..1024, where a CTA has 2-8 rows, do two more
# stages shorten the per-row chain (reading (a) of docs/design/native-kernel.md)? Measured 2026-12-05: no,
# slower at every point (the "probe (not kept)" row there). Run from the root of a copy of the tree.
from source_patch import SourcePatch

source = SourcePatch('kernels/native/native_sm90.cu')
source.replace("""constexpr int kMaxStages = 16;""","""constexpr int kMaxStages = 16;
__constant__ int g_no_stash;  // A/B switch, set from ATTNRES_NO_STASH at the first launch""")
source.replace("""  unsigned char* const ring = smem + kRows * native_stash_bytes(hidden);""",
"""  const bool no_stash = kRows == 1 && g_no_stash;
  unsigned char* const ring = smem + (no_stash ? 0 : kRows * native_stash_bytes(hidden));""")
source.replace("""      float squares = 0.f;
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) squares = fmaf(acc[i], acc[i], squares);
      pending_squares[r] = squares;""","""      float squares = 0.f;
#pragma unroll
      for (int i = 0; i < kElemsPerThread; ++i) squares = fmaf(acc[i], acc[i], squares);
      if (no_stash) {
#pragma unroll
        for (int width = 16; width > 0; width /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, width);
        if (c % 32 == 0) scratch[buffer][c / 32][0] = squares;
        consumer_sync(consumer_threads);
        float row_squares = 0.f;
        for (int w = 0; w < consumer_warps; ++w) row_squares += scratch[buffer][w][0];
        buffer ^= 1;
        store_output(row[r], acc, rsqrtf(row_squares * inv_hidden + s.output_norm_eps));
        continue;
      }
      pending_squares[r] = squares;""")
source.replace("""  const NativeKernel kernel = layout->rows_per_iteration == 2 ? kPairedNativeKernels[shape.num_blocks] : kNativeKernels[shape.num_blocks];
  ATTNRES_CUDA_CHECK(cudaLaunchKernelEx(&launch, kernel, args, layout->stages, vector_copies));""",
"""  const NativeKernel kernel = layout->rows_per_iteration == 2 ? kPairedNativeKernels[shape.num_blocks] : kNativeKernels[shape.num_blocks];
  static const int no_stash = [] {
    const int value = std::getenv("ATTNRES_NO_STASH") && std::getenv("ATTNRES_NO_STASH")[0] == '1';
    ATTNRES_CUDA_CHECK(cudaMemcpyToSymbol(g_no_stash, &value, sizeof value));
    return value;
  }();
  int stages = layout->stages;
  if (no_stash && layout->rows_per_iteration == 1) {
    stages = std::min(kMaxStages, (config.smem_optin - kStaticSharedBytes) / int(shape.hidden * sizeof(bf16_bits)));
    launch.dynamicSmemBytes = std::size_t(stages) * shape.hidden * sizeof(bf16_bits);
  }
  ATTNRES_CUDA_CHECK(cudaLaunchKernelEx(&launch, kernel, args, stages, vector_copies));""")
source.replace("#include <algorithm>\n","#include <algorithm>\n#include <cstdlib>\n")
source.save()
