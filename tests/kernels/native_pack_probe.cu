#include "tests/kernels/native_pack_probe.h"

#include "kernels/common/bf16.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/native/native_device.cuh"

namespace attnres::testing {
namespace {

__device__ bool packs_like_the_host(std::uint32_t input, bf16_bits packed) {
  const bool nan_input = (input & 0x7fffffffu) > 0x7f800000u;
  if (nan_input) return (packed & 0x7fffu) > 0x7f80u;
  return packed == float_to_bf16(bits_float(input));
}

__global__ void pack_probe_kernel(unsigned long long* mismatches, unsigned int* first_input) {
  const std::uint64_t stride = std::uint64_t(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (std::uint64_t i = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (std::uint64_t(1) << 32);
       i += stride) {
    const std::uint32_t low = std::uint32_t(i);
    const std::uint32_t high = ~low;  // every pattern also lands in the high half once
    const std::uint32_t packed = native_device::convert_pair(bits_float(low), bits_float(high));
    const bool low_ok = packs_like_the_host(low, bf16_bits(packed & 0xffffu));
    const bool high_ok = packs_like_the_host(high, bf16_bits(packed >> 16));
    if (!low_ok) atomicMin(first_input, low);
    if (!high_ok) atomicMin(first_input, high);
    local += !low_ok + !high_ok;
  }
  if (local) atomicAdd(mismatches, local);
}

}  // namespace

PackProbeResult probe_native_pack() {
  DeviceBuffer<unsigned long long> mismatches(1);
  DeviceBuffer<unsigned int> first_input(1);
  ATTNRES_CUDA_CHECK(cudaMemset(mismatches.get(), 0, sizeof(unsigned long long)));
  ATTNRES_CUDA_CHECK(cudaMemset(first_input.get(), 0xff, sizeof(unsigned int)));
  pack_probe_kernel<<<1024, 256>>>(mismatches.get(), first_input.get());
  ATTNRES_CHECK_LAUNCH("pack_probe_kernel");
  PackProbeResult result;
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(&result.mismatches, mismatches.get(), sizeof result.mismatches, cudaMemcpyDeviceToHost));
  ATTNRES_CUDA_CHECK(
      cudaMemcpy(&result.first_input, first_input.get(), sizeof result.first_input, cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace attnres::testing
