// --profile: what an external kernel declares it refuses (kernels/registry/preconditions.h), named by a
// preset ("vllm-op", "vllm-dispatch", "flashinfer") or read from a JSON profile file:
//   {"schema_version": 1,
//    "refuses": [{"when": "rows_not_dense", "mode": "must", "message": "... {prefix} ..."},
//                {"when": "hidden_above", "value": 16384, "mode": "may"}]}
#pragma once
#include <string>

#include "kernels/registry/preconditions.h"

namespace attnres {

// Throws std::invalid_argument naming the file and field ("profile.json: /refuses/0/when: ...").
KernelPreconditions load_kernel_profile(const std::string& preset_or_path);

}  // namespace attnres
