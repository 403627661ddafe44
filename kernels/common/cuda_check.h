// Throwing checks for every CUDA runtime and cuBLAS call, with the call and file:line.
#pragma once
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace attnres {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, bool context_lost) : std::runtime_error(message), context_lost_(context_lost) {}
  // A sticky error (illegal address, launch failure ...): later CUDA calls in this process fail too.
  bool context_lost() const { return context_lost_; }

 private:
  bool context_lost_;
};

void cuda_check(cudaError_t status, const char* call, const char* file, int line);
void cublas_check(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace attnres

#define ATTNRES_CUDA_CHECK(call) ::attnres::cuda_check((call), #call, __FILE__, __LINE__)
#define ATTNRES_CUBLAS_CHECK(call) ::attnres::cublas_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: configuration errors surface here, faults at the next sync.
#define ATTNRES_CHECK_LAUNCH(kernel_name) \
  ::attnres::cuda_check(cudaGetLastError(), "launch " kernel_name, __FILE__, __LINE__)
