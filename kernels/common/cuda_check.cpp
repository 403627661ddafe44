#include "kernels/common/cuda_check.h"

#include <fmt/format.h>

namespace attnres {

namespace {

bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: return true;
    default: return false;
  }
}

}  // namespace

void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  if (!is_sticky(status)) cudaGetLastError();  // clear it so the next case starts clean
  throw CudaError(
      fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorString(status), cudaGetErrorName(status)),
      is_sticky(status));
}

void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cublasGetStatusString(status),
                              cublasGetStatusName(status)),
                  false);
}

}  // namespace attnres
