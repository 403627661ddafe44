// `bench`'s measurements: at each point the native and portable kernels (and the kernel --kernel
// names) are checked against the cuBLAS float64 reference, then timed by graph replays on rotating
// input sets larger than L2, against a same-bytes copy timed the same way.
#pragma once
#include "app/bench/bench_results.h"
#include "app/engine/backend_options.h"

namespace attnres {

// Throws std::runtime_error without a CUDA device, UsageError for a --kernel bench cannot time.
BenchResults run_bench(const BenchRequest& request, const BackendOptions& kernel_options);

}  // namespace attnres
