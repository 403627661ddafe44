// The native kernel's mid-T variant (native::Variant::staged). As in the split variant a row is
// one thread-block cluster of `cluster` CTAs, CTA r taking the r-th slice of H, and the partial
// logits and the output norm's sum of squares are exchanged through distributed shared memory.
// The loads differ: one thread issues a bulk copy (cp.async.bulk) of the CTA's slice of every
// source row into shared memory, each completing on its own mbarrier, so all of a row's bytes
// are in flight at once and no register holds a load. With few registers several CTAs share an
// SM, and a CTA's arithmetic overlaps the loads of the CTAs beside it; pass 1 takes each source
// as its copy lands, pass 2 reads the slices again from shared memory.
// Rows of prefix, delta and output are taken as exactly H apart, as in the other variants.
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

#include <cooperative_groups.h>
#include <fmt/format.h>

#include "kernels/cuda_check.h"
#include "kernels/native_device.cuh"
#include "kernels/native_limits.h"
#include "kernels/native_variants.h"

namespace attnres {
namespace {

namespace cg = cooperative_groups;
using native_device::pack_by_conversion;
using native_device::unpack;

constexpr int kVec = native::kElementsPerVector;
constexpr int kMaxLoads = native::kMaxBlocks + 2;  // prefix, delta, the blocks
constexpr int kMaxSlots = 32;

// How a row's sources map to its bulk copies: copy 0 is prefix, 1 delta (if any), then the blocks
// that are read (the written block is p itself, not read).
struct RowLoads {
  int count;
  int first_block;
  int write_idx;
  __device__ explicit RowLoads(const AttnResShape& s)
      : count(0), first_block(s.has_delta ? 2 : 1), write_idx(s.block_write_idx) {
    count = first_block + s.num_blocks - (write_idx >= 0 && write_idx < s.num_blocks ? 1 : 0);
  }
  // The copy of source src >= 1 (block src - 1), or -1 where that block is p.
  __device__ int of_source(int src) const {
    const int block = src - 1;
    if (block == write_idx) return -1;
    return first_block + block - (write_idx >= 0 && write_idx < block ? 1 : 0);
  }
  __device__ const bf16_bits* row(const AttnResArgs& a, std::int64_t t, int copy) const {
    if (copy == 0) return a.prefix + t * a.shape.hidden;
    if (copy < first_block) return a.delta + t * a.shape.hidden;
    int block = copy - first_block;
    if (write_idx >= 0 && block >= write_idx) ++block;
    return a.blocks + t * a.strides.blocks_token + std::int64_t(block) * a.strides.blocks_row;
  }
};

template <int kSources, int kVecs>
__global__ void __launch_bounds__(native::kStagedMaxThreads, 1) attnres_staged_kernel(const AttnResArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char slices[];  // [copy][this CTA's slice of the row]
  __shared__ std::uint64_t landed[kMaxLoads];
  __shared__ float logit_partials[kMaxSlots * 32];  // [slot][value]
  __shared__ float norm_partials[kMaxSlots];
  const cg::cluster_group cluster = cg::this_cluster();
  const int cluster_size = int(cluster.num_blocks());
  const int rank = int(cluster.block_rank());
  const AttnResShape& s = a.shape;
  const std::int64_t hidden = s.hidden;
  const std::int64_t t = blockIdx.x / cluster_size;
  const int slice_elements = s.hidden / cluster_size;
  const std::uint32_t slice_bytes = std::uint32_t(slice_elements) * sizeof(bf16_bits);
  const int owners = slice_elements / kVec / kVecs;
  const int c = threadIdx.x, lane = c % 32, warp = c / 32;
  const int warps = blockDim.x / 32;
  const bool owner = c < owners;
  const RowLoads loads(s);

  if (c == 0) {
    for (int j = 0; j < loads.count; ++j) native_device::mbar_init(&landed[j], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  native_device::wait_for_previous_grid();
  if (c == 0) {
    const std::uint64_t policy = native_device::evict_first_policy();
    for (int j = 0; j < loads.count; ++j) {
      native_device::mbar_arrive_expect_tx(&landed[j], slice_bytes);
      native_device::bulk_load(slices + std::size_t(j) * slice_bytes, loads.row(a, t, j) + std::int64_t(rank) * slice_elements,
                               slice_bytes, &landed[j], policy);
    }
  }
  native_device::allow_dependent_launch();
  // A CTA may write a peer's shared memory only once the peer has started: arrive now, wait just
  // before the first remote write, so the wait hides behind the loads.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  // This thread's vectors: offsets within the slice, in elements.
  int local[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) local[v] = (c + v * owners) * kVec;
  auto slice = [&](int copy, int v) {
    return owner ? *reinterpret_cast<const uint4*>(slices + std::size_t(copy) * slice_bytes + local[v] * sizeof(bf16_bits))
                 : make_uint4(0, 0, 0, 0);
  };
  auto global_offset = [&](int v) { return std::int64_t(rank) * slice_elements + local[v]; };

  float gate[kVecs * kVec];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float nw[kVec], qk[kVec];
    const std::int64_t e = owner ? global_offset(v) : 0;
    unpack(owner ? *reinterpret_cast<const uint4*>(a.norm_weight + e) : make_uint4(0, 0, 0, 0), nw);
    unpack(owner ? *reinterpret_cast<const uint4*>(a.qk_weight + e) : make_uint4(0, 0, 0, 0), qk);
#pragma unroll
    for (int i = 0; i < kVec; ++i) gate[v * kVec + i] = nw[i] * qk[i];
  }

  // Steps 1-2: p, written back at once.
  uint4 p[kVecs];
  native_device::mbar_wait(&landed[0], 0);
  if (s.has_delta) native_device::mbar_wait(&landed[1], 0);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    p[v] = slice(0, v);
    if (s.has_delta) {  // without delta, p is prefix bit for bit (-0.0 + 0.0 would lose the sign)
      float x[kVec], d[kVec];
      unpack(p[v], x);
      unpack(slice(1, v), d);
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[i] += d[i];
      p[v] = pack_by_conversion(x);
    }
    if (owner) {
      *reinterpret_cast<uint4*>(a.prefix + t * hidden + global_offset(v)) = p[v];
      if (loads.write_idx >= 0)
        *reinterpret_cast<uint4*>(a.blocks + t * a.strides.blocks_token + std::int64_t(loads.write_idx) * a.strides.blocks_row +
                                  global_offset(v)) = p[v];
    }
  }
  auto source = [&](int copy, int v) { return copy < 0 ? p[v] : slice(copy, v); };

  // Pass 1, each source as its copy lands: partial dot products (values 0..8) and sums of squares
  // (16..24).
  int copy_of[kSources];
  float sums[32];
#pragma unroll
  for (int k = 0; k < 32; ++k) sums[k] = 0.f;
#pragma unroll
  for (int src = 0; src < kSources; ++src) {
    copy_of[src] = src == 0 ? -1 : loads.of_source(src);
    if (copy_of[src] >= 0) native_device::mbar_wait(&landed[copy_of[src]], 0);
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      float x[kVec];
      unpack(source(copy_of[src], v), x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        sums[src] = fmaf(x[i], gate[v * kVec + i], sums[src]);
        sums[16 + src] = fmaf(x[i], x[i], sums[16 + src]);
      }
    }
  }
  const float warp_total = native_device::warp_transpose_sum(sums);  // lane l: this warp's total of value l
  const int slots = cluster_size * warps;
  const int my_slot = rank * warps + warp;
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  for (int r = 0; r < cluster_size; ++r) cluster.map_shared_rank(logit_partials, r)[my_slot * 32 + lane] = warp_total;
  cluster.sync();
  float total = 0.f;
  for (int slot = 0; slot < slots; ++slot) total += logit_partials[slot * 32 + lane];

  const float inv_hidden = 1.0f / float(s.hidden);
  float weight[kSources];
  native_device::softmax_weights(total, 0, inv_hidden, s.eps, weight);
  float acc[kVecs * kVec];
#pragma unroll
  for (int i = 0; i < kVecs * kVec; ++i) acc[i] = 0.f;
#pragma unroll
  for (int src = 0; src < kSources; ++src)
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
      float x[kVec];
      unpack(source(copy_of[src], v), x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[v * kVec + i] = fmaf(weight[src], x[i], acc[v * kVec + i]);
    }

  // Step 5: the output RMSNorm over the whole row: a second exchange across the cluster.
  float scale = 1.f;
  if (s.has_output_norm) {
    float squares = 0.f;
#pragma unroll
    for (int i = 0; i < kVecs * kVec; ++i) squares = fmaf(acc[i], acc[i], squares);
#pragma unroll
    for (int width = 16; width > 0; width /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, width);
    if (lane < cluster_size) cluster.map_shared_rank(norm_partials, lane)[my_slot] = squares;
    cluster.sync();
    float row_squares = lane < slots ? norm_partials[lane] : 0.f;
#pragma unroll
    for (int width = 16; width > 0; width /= 2) row_squares += __shfl_xor_sync(0xffffffffu, row_squares, width);
    scale = rsqrtf(row_squares * inv_hidden + s.output_norm_eps);
  }
  if (!owner) return;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    float ow[kVec], out[kVec];
    unpack(s.has_output_norm ? *reinterpret_cast<const uint4*>(a.output_norm_weight + global_offset(v))
                             : native_device::bf16_ones(),
           ow);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = acc[v * kVec + i] * scale * ow[i];
    *reinterpret_cast<uint4*>(a.output + t * hidden + global_offset(v)) = pack_by_conversion(out);
  }
#endif
}

using StagedKernel = void (*)(AttnResArgs);
using native::kMaxSources;

template <int kVecs>
constexpr StagedKernel kStagedKernels[kMaxSources] = {
    attnres_staged_kernel<1, kVecs>, attnres_staged_kernel<2, kVecs>, attnres_staged_kernel<3, kVecs>,
    attnres_staged_kernel<4, kVecs>, attnres_staged_kernel<5, kVecs>, attnres_staged_kernel<6, kVecs>,
    attnres_staged_kernel<7, kVecs>, attnres_staged_kernel<8, kVecs>, attnres_staged_kernel<9, kVecs>};

// Kept out of the dynamic shared memory for the kernel's static part (barriers, partials).
constexpr int kStaticSharedBytes = 8192;

// The dynamic shared memory a staged kernel may take on `device`: the kernels' limit is raised
// once per device, so a launch makes no attribute calls and can be captured into a CUDA graph.
int staged_shared_bytes(int device) {
  static std::mutex mutex;
  static std::map<int, int> raised;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = raised.find(device);
  if (found != raised.end()) return found->second;
  int optin = 0;
  ATTNRES_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int bytes = optin - kStaticSharedBytes;
  for (const StagedKernel kernel : kStagedKernels<1>)
    ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  for (const StagedKernel kernel : kStagedKernels<2>)
    ATTNRES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised.emplace(device, bytes);
  return bytes;
}

}  // namespace

void launch_native_staged(const AttnResArgs& args, const native::Plan& plan, bool programmatic_dependent_launch,
                          cudaStream_t stream) {
  const AttnResShape& shape = args.shape;
  if (shape.tokens > std::numeric_limits<int>::max() / plan.cluster)
    throw std::invalid_argument(fmt::format("native kernel ({}): {} tokens exceed the grid", native::to_string(plan), shape.tokens));
  int device = 0;
  ATTNRES_CUDA_CHECK(cudaGetDevice(&device));
  const int copies = 1 + int(shape.has_delta) + shape.num_blocks -
                     (shape.block_write_idx >= 0 && shape.block_write_idx < shape.num_blocks ? 1 : 0);
  const std::size_t slice_bytes = std::size_t(shape.hidden / plan.cluster) * sizeof(bf16_bits);
  const std::size_t shared_bytes = std::size_t(copies) * slice_bytes;
  if (shared_bytes > std::size_t(staged_shared_bytes(device)))
    throw std::invalid_argument(fmt::format("native kernel ({}): {} row copies of {} bytes exceed this device's {} bytes of shared memory",
                                            native::to_string(plan), copies, slice_bytes, staged_shared_bytes(device)));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(shape.tokens * plan.cluster));
  config.blockDim = dim3(unsigned(native::split_threads(plan, shape.hidden)));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeClusterDimension;
  attributes[0].val.clusterDim.x = unsigned(plan.cluster);
  attributes[0].val.clusterDim.y = 1;
  attributes[0].val.clusterDim.z = 1;
  attributes[1] = programmatic_serialization();
  config.attrs = attributes;
  config.numAttrs = programmatic_dependent_launch ? 2 : 1;
  const StagedKernel kernel = plan.vectors_per_thread == 1 ? kStagedKernels<1>[shape.num_blocks]
                                                           : kStagedKernels<2>[shape.num_blocks];
  ATTNRES_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
  ATTNRES_CHECK_LAUNCH("attnres_staged_kernel");
}

}  // namespace attnres
