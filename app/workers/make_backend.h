// The backend the options name, with the kernel --kernel names in its registry (a built-in, or
// an external kernel loaded now).
#pragma once
#include <memory>
#include <string>

#include "app/engine/backend.h"
#include "app/engine/backend_options.h"

namespace attnres {

// The backend the options ask for; `note` explains a fallback. Throws UsageError. Where the
// backend must be a CUDA device (--backend cuda, or `cuda_required_by` names the option that
// asks for one, such as "--devices all"), no device is the run's error, named after that option.
std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string& note,
                                      const std::string& cuda_required_by = "");

}  // namespace attnres
