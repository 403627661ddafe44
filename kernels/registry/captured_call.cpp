#include <string>

#include <fmt/format.h>

#include "kernels/common/cuda_check.h"
#include "kernels/registry/kernel_entry.h"

namespace attnres {
namespace {

class CudaGraphCall : public CapturedCall {
 public:
  CudaGraphCall(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaGraphCall() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  CudaGraphCall(const CudaGraphCall&) = delete;
  CudaGraphCall& operator=(const CudaGraphCall&) = delete;
  void replay(cudaStream_t stream) override { ATTNRES_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

// Ends a capture that failed; what ending it said, if it said anything.
std::string abandon_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // a capture's errors are not sticky: later calls must not see them
  return ended == cudaSuccess ? "" : cudaGetErrorString(ended);
}

}  // namespace

std::unique_ptr<CapturedCall> KernelEntry::capture(const std::vector<AttnResArgs>& calls, const LaunchOptions& options,
                                                   cudaStream_t stream) {
  ATTNRES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    for (const AttnResArgs& args : calls) launch(args, options, stream);
  } catch (const KernelRejection&) {
    abandon_capture(stream);
    throw;
  } catch (const std::exception& e) {
    const std::string ended = abandon_capture(stream);
    throw GraphCaptureError(ended.empty() ? e.what() : fmt::format("{} (ending the capture: {})", e.what(), ended));
  }
  cudaGraph_t graph = nullptr;
  if (const cudaError_t ended = cudaStreamEndCapture(stream, &graph); ended != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw GraphCaptureError(fmt::format("cudaStreamEndCapture: {}", cudaGetErrorString(ended)));
  }
  cudaGraphExec_t exec = nullptr;
  if (const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0); made != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    throw GraphCaptureError(fmt::format("cudaGraphInstantiate: {}", cudaGetErrorString(made)));
  }
  return std::make_unique<CudaGraphCall>(graph, exec);
}

}  // namespace attnres
