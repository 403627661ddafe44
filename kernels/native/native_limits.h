// What the native kernel supports; the dispatcher sends everything else to the portable kernel.
#pragma once

namespace attnres::native {

// Each consumer thread owns two 8-element (16-byte) vectors of the row: H / 16 consumer threads,
// a whole number of warps, plus one producer warp. H <= 7680 keeps that at 512 threads (128
// registers each, no spills) and lets a whole row of 10 loads stay resident in shared memory.
constexpr int kHiddenMultiple = 512;
constexpr int kMaxHidden = 7680;
constexpr int kMaxBlocks = 8;
constexpr int kMaxSources = kMaxBlocks + 1;  // the blocks and p
constexpr int kVectorsPerThread = 2;
constexpr int kElementsPerVector = 8;

}  // namespace attnres::native
