// make_worker_runner (worker.h): one case at a time in one worker process, replaced when a case
// takes it down.
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "app/bundle/failure_bundles.h"
#include "app/casefile/json_io.h"
#include "app/engine/command_output.h"
#include "app/engine/interrupt.h"
#include "app/report/result_json.h"
#include "app/workers/sanitizer.h"
#include "app/workers/worker.h"
#include "app/workers/worker_process.h"

namespace attnres {

using nlohmann::json;

namespace {

// A worker's refusal ({key: text, "usage": bool}) as the error it reports: a usage error (exit 2)
// or another.
[[noreturn]] void throw_worker_error(const json& message, const char* key) {
  const std::string text = message.at(key).get<std::string>();
  if (message.at("usage").get<bool>()) throw UsageError(text);
  throw std::runtime_error(text);
}

// CaseRunner on one worker process at a time (case_runner.h).
class WorkerRunner final : public CaseRunner {
 public:
  WorkerRunner(WorkerBackendMaker make_backend, const BackendOptions& backend, RunOptions options,
               std::optional<SanitizerPlan> sanitizer, std::string& notes)
      : CaseRunner(std::move(options)),
        make_backend_(std::move(make_backend)),
        backend_options_(backend),
        sanitizer_(std::move(sanitizer)) {
    notes += start();
  }

  CaseResult run(const CaseSpec& spec, bool disable_layout_guard) override {
    return ask(spec, case_request(spec, disable_layout_guard), nullptr);
  }

  CaseResult write_bundle(const CaseSpec& spec, const std::filesystem::path& dir, bool force, CommandOutput& out,
                          const CaseResult* judged_in_run) override {
    json request = case_request(spec, options_.disable_layout_guard);
    request["bundle"] = {{"dir", dir.string()}, {"force", force}};
    if (judged_in_run) request["bundle"]["judged_in_run"] = result_json(*judged_in_run);
    const CaseResult result = ask(spec, request, &out);
    if (!lost_) return result;
    // The case took its worker down: a fresh one writes the bundle from that result, without
    // running the kernel again (the directory is already this command's).
    request["bundle"] = {{"dir", dir.string()}, {"force", true}, {"judged_in_run", result_json(result)}};
    return ask(spec, request, &out);
  }

  std::string backend_name() const override { return backend_; }
  std::string device_description() const override { return device_; }

 private:
  static json case_request(const CaseSpec& spec, bool disable_layout_guard) {
    return {{"case", case_to_json(spec)},
            {"file", spec.file},
            {"pointer", spec.pointer},
            {"disable_layout_guard", disable_layout_guard}};
  }

  // The worker's next message, or nothing once it is gone or past the deadline (then killed);
  // `how` says which.
  std::optional<json> next_message(std::string& how) {
    const Deadline due{backend_options_.timeout_seconds, started_};
    for (;;) {
      if (std::optional<json> message = worker_->buffered()) return message;
      if (const int signal = interrupt_signal()) {
        worker_->kill();
        how = interrupted_detail(signal);
        return std::nullopt;
      }
      if (due.passed()) {
        worker_->kill();
        how = fmt::format("gave no answer within {} s (--timeout) and was killed", backend_options_.timeout_seconds);
        return std::nullopt;
      }
      pollfd waiting{worker_->socket(), POLLIN, 0};
      const int ready = ::poll(&waiting, 1, due.poll_milliseconds());
      if (ready < 0 && errno != EINTR)
        throw std::runtime_error(fmt::format("waiting for the worker process: {}", std::strerror(errno)));
      if (ready > 0 && !worker_->read_more()) {
        how = worker_->ending();
        return std::nullopt;
      }
    }
  }

  // Starts a worker and waits for its greeting; a worker that cannot start is the command's error.
  std::string start() {
    if (sanitizer_) {
      // Named for its case once that is judged.
      report_ = sanitizer_->reports / fmt::format(".running-{}.txt", ++workers_started_);
      worker_ = std::make_unique<WorkerProcess>([&](int socket) {
        return sanitized_worker_command(*sanitizer_, report_, socket, backend_options_, options_);
      });
    } else {
      worker_ =
          std::make_unique<WorkerProcess>(std::vector<CaseSpec>{}, nullptr, make_backend_, options_, backend_options_);
    }
    started_ = std::chrono::steady_clock::now();
    std::string how;
    const std::optional<json> hello = next_message(how);
    if (!hello) {
      worker_.reset();
      throw std::runtime_error(fmt::format("the worker process {} before it could run a case", how));
    }
    if (hello->contains("fatal")) {
      worker_.reset();
      throw_worker_error(*hello, "fatal");
    }
    backend_ = hello->at("backend").get<std::string>();
    device_ = hello->at("device").get<std::string>();
    return hello->at("notes").get<std::string>();
  }

  CaseResult ask(const CaseSpec& spec, const json& request, CommandOutput* out) {
    lost_ = false;
    if (!worker_) start();
    started_ = std::chrono::steady_clock::now();
    std::string how;
    std::optional<json> answer;
    if (worker_->request(request))
      answer = next_message(how);
    else
      how = worker_->ending();
    if (!answer) {
      worker_.reset();
      lost_ = true;
      if (interrupt_signal()) {
        std::error_code ignored;  // a report that cannot be removed stays
        if (sanitizer_) std::filesystem::remove(report_, ignored);
        return lost_case(spec, backend_, device_, options_.kernel, how, started_, Disposition::not_run);
      }
      return sanitized(
          spec, std::nullopt,
          lost_case(spec, backend_, device_, options_.kernel,
                    fmt::format("the worker process running this case {}; a new worker runs the next case", how),
                    started_));
    }
    // Under the sanitizer the worker's process ends with its case, and says how it went.
    std::optional<int> sanitizer_exit;
    if (sanitizer_) sanitizer_exit = worker_->finish(backend_options_.timeout_seconds);
    // A lost CUDA context would fail every later case there: a fresh worker takes over.
    if (sanitizer_ || answer->at("restart").get<bool>()) worker_.reset();
    if (answer->contains("error")) throw_worker_error(*answer, "error");
    if (out && answer->contains("text")) {
      out->text += answer->at("text").get<std::string>();
      out->notes += answer->at("notes").get<std::string>();
    }
    return sanitized(spec, sanitizer_exit, result_from_json(answer->at("result")));
  }

  // Under the sanitizer: the case's report named for it, and `result` judged with it.
  CaseResult sanitized(const CaseSpec& spec, std::optional<int> exit_code, CaseResult result) {
    if (!sanitizer_) return result;
    const std::filesystem::path named = sanitizer_->reports / (file_name_for_case(spec.name, report_names_) + ".txt");
    std::error_code ec;
    std::filesystem::rename(report_, named, ec);  // failing that, the report keeps its first name
    result = with_sanitizer_verdict(std::move(result), sanitizer_->tool, exit_code, ec ? report_ : named);
    if (result.disposition != Disposition::hazard && !sanitizer_->keep_clean_reports)
      std::filesystem::remove(ec ? report_ : named, ec);
    return result;
  }

  WorkerBackendMaker make_backend_;
  BackendOptions backend_options_;
  std::unique_ptr<WorkerProcess> worker_;
  std::chrono::steady_clock::time_point started_;
  std::string backend_ = "none", device_ = "none";
  bool lost_ = false;  // the last case took its worker down
  std::optional<SanitizerPlan> sanitizer_;
  std::filesystem::path report_;  // the running worker's compute-sanitizer report
  std::set<std::string> report_names_;
  int workers_started_ = 0;
};

}  // namespace

std::unique_ptr<CaseRunner> make_worker_runner(const BackendMaker& make_backend, const BackendOptions& backend,
                                               const RunOptions& options, std::string& notes) {
  const WorkerBackendMaker make = [make_backend](std::string& n) { return make_backend(-1, n); };
  return std::make_unique<WorkerRunner>(make, backend, options, std::nullopt, notes);
}

std::unique_ptr<CaseRunner> make_sanitized_runner(const SanitizerPlan& sanitizer, const BackendOptions& backend,
                                                  const RunOptions& options, std::string& notes) {
  return std::make_unique<WorkerRunner>(nullptr, backend, options, sanitizer, notes);
}

}  // namespace attnres
