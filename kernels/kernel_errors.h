// How a kernel says no, and how it fails: kinds of error, kept apart from CUDA errors.
#pragma once
#include <stdexcept>

namespace attnres {

// The kernel refused the call before computing anything; the message is its own (matched
// against a case's expected message).
class KernelRejection : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The kernel failed in a way that is not a refusal (a plugin's error code, an exception).
class KernelFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attnres
