// How a kernel says no, and how it fails: kinds of error, kept apart from CUDA errors.
#pragma once
#include <stdexcept>
#include <string>

namespace attnres {

// The kernel refused the call before computing anything; the message is its own (matched
// against a case's expected message). `kind` names the error's type where the kernel has one
// ("ValueError", "c10::Error"); `context` is anything else it said (a traceback).
class KernelRejection : public std::runtime_error {
 public:
  explicit KernelRejection(const std::string& message, std::string kind = "", std::string context = "")
      : std::runtime_error(message), kind_(std::move(kind)), context_(std::move(context)) {}
  const std::string& kind() const { return kind_; }
  const std::string& context() const { return context_; }

 private:
  std::string kind_, context_;
};

// The kernel failed in a way that is not a refusal (a plugin's error code, an exception);
// `context` as for a rejection.
class KernelFailure : public std::runtime_error {
 public:
  explicit KernelFailure(const std::string& message, std::string context = "")
      : std::runtime_error(message), context_(std::move(context)) {}
  const std::string& context() const { return context_; }

 private:
  std::string context_;
};

// The kernel ran, but what it returned cannot be the output (wrong shape, dtype or device).
class KernelWrongResult : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The call could not be recorded into a CUDA graph: CUDA's error, or the kernel's own while
// capturing. `leaves_process_unusable`: the kernel's framework may still hold the broken capture
// (torch's allocator keeps routing the stream to the graph's pool), so later calls in this process
// cannot be trusted.
class GraphCaptureError : public std::runtime_error {
 public:
  explicit GraphCaptureError(const std::string& message, bool leaves_process_unusable = false)
      : std::runtime_error(message), leaves_process_unusable_(leaves_process_unusable) {}
  bool leaves_process_unusable() const { return leaves_process_unusable_; }

 private:
  bool leaves_process_unusable_;
};

}  // namespace attnres
