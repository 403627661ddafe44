// A test kernel behind the C ABI on CUDA (kDLCUDA) operands, written apart from the tool's own
// kernels: one block per token, every stride honoured, the fixed kernel's packed-row check.
// ATTNRES_PLUGIN_CUDA_OUT_OF_BOUNDS also writes one element past the output's last row, so the
// tool must report a memory violation (and judge later cases normally).
// ATTNRES_PLUGIN_CUDA_FAULTS writes through a wild pointer on every call with 3 blocks: an
// illegal address, a sticky error that ends the CUDA context (the tool must lose only that case).
// ATTNRES_PLUGIN_CUDA_HANGS never finishes a call with 3 blocks, like a kernel waiting on a
// barrier that never completes (the tool must kill its worker after --timeout, lose that case only).
// ATTNRES_PLUGIN_CUDA_LATE_WRITER computes correctly on the stream it is given, then queues on a
// non-blocking stream of its own a kernel that waits about 50 ms and adds 1 to every output
// element: a tool that judges before every stream is done calls it correct.
// ATTNRES_PLUGIN_CUDA_DEFAULT_STREAM launches on the legacy default stream, not the one it is given:
// right whenever the inputs are ready before the call, wrong when the given stream writes them.
// ATTNRES_PLUGIN_CUDA_DEPENDS_ON_BATCH rounds its softmax weights to bf16 from 256 tokens on (a
// large-batch path): within tolerance, and a row's bits depend on the batch.
// ATTNRES_PLUGIN_CUDA_LEAKS_GARBAGE scales every output by 1 + 0 * a sum of |p| over the whole
// batch (a batch-wide amax for a quantization scale): a NaN or Inf in any row makes every row NaN.
// Asked for programmatic dependent launch (enable_pdl), every variant launches with it and waits
// for the previous grid first; ATTNRES_PLUGIN_CUDA_READS_BEFORE_WAIT launches with it and never
// waits, so it reads inputs the previous kernel has not written yet.
// ATTNRES_PLUGIN_CUDA_INT32_OFFSETS computes element offsets in 32-bit ints: right below 2^31
// elements, a wild address past them (cases/scale).
// ATTNRES_PLUGIN_CUDA_READS_PAST_SCRATCH computes correctly, and first reads 4 bytes just past the end
// of a 256-byte buffer of its own, a value it never uses: no check of its results can see it,
// compute-sanitizer's memcheck can (run --sanitizer memcheck).
// ATTNRES_PLUGIN_CUDA_BAKES_AT_CAPTURE multiplies norm_weight by qk_weight on the host at every
// call and uploads the product; a call being captured in a CUDA graph cannot read the weights
// back, so it records the upload of the last product made: replays use the weights of the
// last eager call.
#include <attnres/kernel_abi.h>

#include <cuda_bf16.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "packed_rows.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxSources = 65;

// The element offset t * t_stride + s * s_stride + h.
__device__ long long element_offset(long long t, long long t_stride, long long s, long long s_stride, long long h) {
  const long long offset = t * t_stride + s * s_stride + h;
#if defined(ATTNRES_PLUGIN_CUDA_INT32_OFFSETS)
  return static_cast<int>(static_cast<unsigned int>(offset));  // as a kernel that indexes with int computes it
#else
  return offset;
#endif
}

__device__ float load(const DLTensor& t, long long offset) {
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(t.data)[offset]);
}

// Sum over the block; every thread gets the result.
__device__ float block_sum(float value, float* scratch) {
  for (int step = 16; step > 0; step /= 2) value += __shfl_xor_sync(0xffffffffu, value, step);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

struct Operands {
  DLTensor prefix, delta, blocks, norm_weight, qk_weight, output_norm_weight, output;
  bool has_delta, has_output_norm;
  int num_blocks, block_write_idx;
  float eps, output_norm_eps;
  long long prefix_row, delta_row, output_row, block_token, block_row;
  long long hidden;
  const float* fused_weight;  // norm_weight * qk_weight, where the kernel made it beforehand
  bool wait_for_previous_grid;
};

#if defined(ATTNRES_PLUGIN_CUDA_LEAKS_GARBAGE)
__device__ float batch_sum;

// batch_sum += |prefix + delta| over the block's token: the batch-wide reduction every row then reads.
__global__ void batch_sum_kernel(Operands o) {
  __shared__ float scratch[kThreads / 32];
  const long long t = blockIdx.x;
  float sum = 0;
  for (long long h = threadIdx.x; h < o.hidden; h += kThreads)
    sum += fabsf(load(o.prefix, t * o.prefix_row + h) + (o.has_delta ? load(o.delta, t * o.delta_row + h) : 0.0f));
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) atomicAdd(&batch_sum, sum);
}
#endif

// A softmax weight as this kernel uses it.
__device__ float weight_of(float weight) {
#if defined(ATTNRES_PLUGIN_CUDA_DEPENDS_ON_BATCH)
  if (gridDim.x >= 256) return __bfloat162float(__float2bfloat16_rn(weight));
#endif
  return weight;
}

__global__ void attn_res_kernel(Operands o) {
#if __CUDA_ARCH__ >= 900
  if (o.wait_for_previous_grid) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  __shared__ float scratch[kThreads / 32];
  __shared__ float logits[kMaxSources];
  const long long t = blockIdx.x;
  auto* prefix = reinterpret_cast<__nv_bfloat16*>(o.prefix.data) + element_offset(t, o.prefix_row, 0, 0, 0);
  auto* blocks = reinterpret_cast<__nv_bfloat16*>(o.blocks.data);
  auto block = [&](long long s, long long h) -> __nv_bfloat16& {
    return blocks[element_offset(t, o.block_token, s, o.block_row, h)];
  };
  for (long long h = threadIdx.x; h < o.hidden; h += kThreads) {
    float sum = __bfloat162float(prefix[h]);
    if (o.has_delta) sum += load(o.delta, element_offset(t, o.delta_row, 0, 0, h));
    prefix[h] = __float2bfloat16_rn(sum);
    if (o.block_write_idx >= 0) block(o.block_write_idx, h) = prefix[h];
  }
  __syncthreads();
  const int sources = o.num_blocks + 1;
  auto source = [&](int s, long long h) { return __bfloat162float(s < o.num_blocks ? block(s, h) : prefix[h]); };
  for (int s = 0; s < sources; ++s) {
    float dot = 0, squares = 0;
    for (long long h = threadIdx.x; h < o.hidden; h += kThreads) {
      const float v = source(s, h);
      dot += o.fused_weight ? v * o.fused_weight[h] : v * load(o.norm_weight, h) * load(o.qk_weight, h);
      squares += v * v;
    }
    dot = block_sum(dot, scratch);
    squares = block_sum(squares, scratch);
    if (threadIdx.x == 0) logits[s] = dot * rsqrtf(squares / float(o.hidden) + o.eps);
  }
  __syncthreads();
  float max_logit = -INFINITY, total = 0;
  for (int s = 0; s < sources; ++s) max_logit = fmaxf(max_logit, logits[s]);
  for (int s = 0; s < sources; ++s) total += __expf(logits[s] - max_logit);
  float squares = 0;
  for (long long h = threadIdx.x; h < o.hidden; h += kThreads) {
    float mixed = 0;
    for (int s = 0; s < sources; ++s) mixed += weight_of(__expf(logits[s] - max_logit) / total) * source(s, h);
    squares += mixed * mixed;
  }
  const float scale =
      o.has_output_norm ? rsqrtf(block_sum(squares, scratch) / float(o.hidden) + o.output_norm_eps) : 1.0f;
  auto* output = reinterpret_cast<__nv_bfloat16*>(o.output.data) + element_offset(t, o.output_row, 0, 0, 0);
  for (long long h = threadIdx.x; h < o.hidden; h += kThreads) {
    float mixed = 0;
    for (int s = 0; s < sources; ++s) mixed += weight_of(__expf(logits[s] - max_logit) / total) * source(s, h);
    const float weight = o.has_output_norm ? load(o.output_norm_weight, h) : 1.0f;
#if defined(ATTNRES_PLUGIN_CUDA_LEAKS_GARBAGE)
    output[h] = __float2bfloat16_rn(mixed * scale * weight * (1 + 0 * batch_sum));
#else
    output[h] = __float2bfloat16_rn(mixed * scale * weight);
#endif
  }
#if defined(ATTNRES_PLUGIN_CUDA_OUT_OF_BOUNDS)
  if (t == gridDim.x - 1 && threadIdx.x == 0) output[o.output_row] = __float2bfloat16_rn(1.0f);
#elif defined(ATTNRES_PLUGIN_CUDA_FAULTS)
  if (o.num_blocks == 3 && threadIdx.x == 0) output[-(1ll << 40)] = __float2bfloat16_rn(1.0f);
#elif defined(ATTNRES_PLUGIN_CUDA_HANGS)
  if (o.num_blocks == 3)
    for (;;) __nanosleep(1000000);
#endif
}

#if defined(ATTNRES_PLUGIN_CUDA_LATE_WRITER)
__global__ void late_write_kernel(DLTensor output, long long tokens, long long hidden, long long row) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (int i = 0; i < 50; ++i) __nanosleep(1000000);
  __syncthreads();
  auto* out = reinterpret_cast<__nv_bfloat16*>(output.data) + blockIdx.x * row;
  for (long long h = threadIdx.x; h < hidden; h += kThreads)
    out[h] = __float2bfloat16_rn(__bfloat162float(out[h]) + 1.0f);
}
#endif

#if defined(ATTNRES_PLUGIN_CUDA_READS_PAST_SCRATCH)
constexpr int kScratchFloats = 64;

// A volatile load: ptxas drops a plain one whose value is never used.
__global__ void stray_read_kernel(const float* scratch) {
  float ignored;
  asm volatile("ld.volatile.global.f32 %0, [%1];" : "=f"(ignored) : "l"(scratch + kScratchFloats));
}
#endif

#if defined(ATTNRES_PLUGIN_CUDA_BAKES_AT_CAPTURE)
float bf16_value(unsigned short bits) {
  const unsigned int word = unsigned(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// norm_weight * qk_weight made on the host and queued for upload; nullptr when it fails (the
// message in c->error, or CUDA's last error).
const float* fused_weight(const AttnResKernelCall* c, long long hidden) {
  static float* host = nullptr;
  static float* device = nullptr;
  static long long size = 0;
  const auto stream = static_cast<cudaStream_t>(c->stream);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) return nullptr;
  if (capturing == cudaStreamCaptureStatusNone) {
    if (size < hidden) {
      cudaFreeHost(host);
      cudaFree(device);
      if (cudaMallocHost(&host, size_t(hidden) * sizeof(float)) != cudaSuccess ||
          cudaMalloc(&device, size_t(hidden) * sizeof(float)) != cudaSuccess)
        return nullptr;
      size = hidden;
    }
    std::vector<unsigned short> norm(static_cast<size_t>(hidden)), qk(static_cast<size_t>(hidden));
    if (cudaMemcpyAsync(norm.data(), c->norm_weight->data, size_t(hidden) * 2, cudaMemcpyDeviceToHost, stream) ||
        cudaMemcpyAsync(qk.data(), c->qk_weight->data, size_t(hidden) * 2, cudaMemcpyDeviceToHost, stream) ||
        cudaStreamSynchronize(stream))
      return nullptr;
    for (long long h = 0; h < hidden; ++h) host[h] = bf16_value(norm[size_t(h)]) * bf16_value(qk[size_t(h)]);
  } else if (size < hidden) {
    std::snprintf(c->error, c->error_capacity, "no weights were made before the capture");
    return nullptr;
  }
  if (cudaMemcpyAsync(device, host, size_t(hidden) * sizeof(float), cudaMemcpyHostToDevice, stream)) return nullptr;
  return device;
}
#endif

}  // namespace

extern "C" const AttnResKernelInfo* attnres_kernel_info(void) {
  static const AttnResKernelInfo info{ATTNRES_KERNEL_ABI_VERSION, kDLCUDA, "attnres-check test plugin (CUDA)"};
  return &info;
}

extern "C" int attnres_kernel(const AttnResKernelCall* c) {
  if (refuse_unless_packed(c)) return ATTNRES_KERNEL_REFUSED;
  const long long hidden = c->prefix->shape[1];
  if (c->num_blocks + 1 > kMaxSources) {
    std::snprintf(c->error, c->error_capacity, "test plugin supports at most %d blocks", kMaxSources - 1);
    return ATTNRES_KERNEL_REFUSED;
  }
  Operands o{};
  o.prefix = *c->prefix;
  o.has_delta = c->delta != nullptr;
  if (o.has_delta) o.delta = *c->delta;
  o.blocks = *c->blocks;
  o.norm_weight = *c->norm_weight;
  o.qk_weight = *c->qk_weight;
  o.has_output_norm = c->output_norm_weight != nullptr;
  if (o.has_output_norm) o.output_norm_weight = *c->output_norm_weight;
  o.output = *c->output;
  o.num_blocks = int(c->num_blocks);
  o.block_write_idx = int(c->block_write_idx);
  o.eps = float(c->eps);
  o.output_norm_eps = float(c->output_norm_eps);
  o.prefix_row = c->prefix->strides[0];
  o.delta_row = o.has_delta ? c->delta->strides[0] : 0;
  o.output_row = c->output->strides[0];
  o.block_token = c->blocks->strides[0];
  o.block_row = c->blocks->strides[1];
  o.hidden = hidden;
  const long long tokens = c->prefix->shape[0];
  if (tokens == 0) return ATTNRES_KERNEL_OK;
#if defined(ATTNRES_PLUGIN_CUDA_LEAKS_GARBAGE)
  void* sum = nullptr;
  if (cudaGetSymbolAddress(&sum, batch_sum) != cudaSuccess ||
      cudaMemsetAsync(sum, 0, sizeof(float), static_cast<cudaStream_t>(c->stream)) != cudaSuccess) {
    std::snprintf(c->error, c->error_capacity, "batch sum: %s", cudaGetErrorString(cudaGetLastError()));
    return ATTNRES_KERNEL_FAILED;
  }
  batch_sum_kernel<<<unsigned(tokens), kThreads, 0, static_cast<cudaStream_t>(c->stream)>>>(o);
#endif
#if defined(ATTNRES_PLUGIN_CUDA_BAKES_AT_CAPTURE)
  o.fused_weight = fused_weight(c, hidden);
  if (!o.fused_weight) {
    if (!c->error[0]) std::snprintf(c->error, c->error_capacity, "%s", cudaGetErrorString(cudaGetLastError()));
    return ATTNRES_KERNEL_FAILED;
  }
#endif
#if defined(ATTNRES_PLUGIN_CUDA_READS_PAST_SCRATCH)
  static float* scratch = nullptr;  // made at the first call, before any capture
  if (!scratch && cudaMalloc(&scratch, kScratchFloats * sizeof(float)) != cudaSuccess) {
    std::snprintf(c->error, c->error_capacity, "scratch: %s", cudaGetErrorString(cudaGetLastError()));
    return ATTNRES_KERNEL_FAILED;
  }
  stray_read_kernel<<<1, 1, 0, static_cast<cudaStream_t>(c->stream)>>>(scratch);
#endif
#if defined(ATTNRES_PLUGIN_CUDA_DEFAULT_STREAM)
  attn_res_kernel<<<unsigned(tokens), kThreads>>>(o);
#else
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(tokens));
  config.blockDim = dim3(kThreads);
  config.stream = static_cast<cudaStream_t>(c->stream);
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  if (c->abi_version >= 2 && c->enable_pdl) {
    config.attrs = &pdl;
    config.numAttrs = 1;
#if !defined(ATTNRES_PLUGIN_CUDA_READS_BEFORE_WAIT)
    o.wait_for_previous_grid = true;
#endif
  }
  cudaLaunchKernelEx(&config, attn_res_kernel, o);
#endif
#if defined(ATTNRES_PLUGIN_CUDA_LATE_WRITER)
  static cudaStream_t own = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  cudaEvent_t done;
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  cudaEventRecord(done, static_cast<cudaStream_t>(c->stream));
  cudaStreamWaitEvent(own, done, 0);
  cudaEventDestroy(done);
  late_write_kernel<<<unsigned(tokens), kThreads, 0, own>>>(o.output, tokens, hidden, o.output_row);
#endif
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    std::snprintf(c->error, c->error_capacity, "launch failed: %s", cudaGetErrorString(status));
    return ATTNRES_KERNEL_FAILED;
  }
  return ATTNRES_KERNEL_OK;
}
