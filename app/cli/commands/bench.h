// `attnres-check bench`: native and portable kernels, and the kernel --kernel names, timed with
// CUDA events over rotating input sets larger than L2, against a copy bandwidth measured in the
// same run. Every point is checked against the cuBLAS float64 reference before it is timed.
#pragma once
#include "app/cli/cli.h"
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput bench_command(const BenchArguments& args, const BackendOptions& kernel);

}  // namespace attnres
