#include "app/workers/worker.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "app/bundle/bundle.h"
#include "app/casefile/json_io.h"
#include "app/engine/command_output.h"
#include "app/engine/interrupt.h"
#include "app/report/result_json.h"
#include "kernels/common/cuda_check.h"

namespace attnres {

using nlohmann::json;

namespace {

// Writes all of `text`; false when the peer is gone (no SIGPIPE: MSG_NOSIGNAL).
bool send_all(int socket, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(socket, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += std::size_t(n);
  }
  return true;
}

// Lines from a socket: next() blocks for one; buffered() and read_more() let a caller poll
// several sockets.
class LineReader {
 public:
  explicit LineReader(int socket) : socket_(socket) {}
  // The next line, or nothing once the peer has closed the socket.
  std::optional<std::string> next() {
    for (;;) {
      if (std::optional<std::string> line = buffered()) return line;
      if (!read_more()) return std::nullopt;
    }
  }
  // A whole line already received, if there is one.
  std::optional<std::string> buffered() {
    const std::size_t end = buffer_.find('\n');
    if (end == std::string::npos) return std::nullopt;
    std::string line = buffer_.substr(0, end);
    buffer_.erase(0, end + 1);
    return line;
  }
  // One read; false once the peer has closed the socket.
  bool read_more() {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(socket_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer_.append(chunk, std::size_t(n));
      return true;
    }
  }

 private:
  int socket_;
  std::string buffer_;
};

[[noreturn]] void finish(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// The child: makes its backend, says hello (or why it could not), then runs each case index it
// is sent. Never returns.
// A worker's own backend maker: its device already chosen.
using WorkerBackendMaker = std::function<std::unique_ptr<Backend>(std::string& notes)>;

// What a worker is asked, one JSON line each: {"index": i} runs cases[i]; {"case": ..., "file",
// "pointer", "disable_layout_guard"} runs that case, and with "bundle" ({"dir", "force", and
// "ended_elsewhere": the result of a run that took a worker down}) writes its repro bundle.
json answer_request(const json& request, const std::vector<CaseSpec>& cases, const InputSource* replay,
                    Backend& backend, const RunOptions& options, const BackendOptions& backend_options) {
  if (request.contains("index"))
    return {
        {"result", result_json(run_case(cases.at(request.at("index").get<std::size_t>()), backend, options, replay))}};
  const CaseSpec spec =
      parse_case(request.at("case"), request.at("file").get<std::string>(), request.at("pointer").get<std::string>());
  RunOptions this_case = options;
  this_case.disable_layout_guard = request.at("disable_layout_guard").get<bool>();
  if (!request.contains("bundle")) return {{"result", result_json(run_case(spec, backend, this_case))}};
  const json& bundle = request.at("bundle");
  std::optional<CaseResult> ended_elsewhere;
  if (bundle.contains("ended_elsewhere")) ended_elsewhere = result_from_json(bundle.at("ended_elsewhere"));
  CommandOutput out;
  const CaseResult result =
      write_repro_bundle(spec, backend, this_case, backend_options, bundle.at("dir").get<std::string>(),
                         bundle.at("force").get<bool>(), out, ended_elsewhere ? &*ended_elsewhere : nullptr);
  return {{"result", result_json(result)}, {"text", out.text}, {"notes", out.notes}};
}

[[noreturn]] void serve(int socket, const std::vector<CaseSpec>& cases, const InputSource* replay,
                        const WorkerBackendMaker& make_backend, const RunOptions& options,
                        const BackendOptions& backend_options) {
  auto say = [&](const json& message) {
    if (!send_all(socket, dump_json(message) + "\n")) finish(1);
  };
  std::unique_ptr<Backend> backend;
  std::string notes;
  int device_count = 0;
  try {
    backend = make_backend(notes);
    if (backend->name() == "cuda") ATTNRES_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  } catch (const UsageError& e) {
    say({{"fatal", e.what()}, {"usage", true}});
    finish(0);
  } catch (const std::exception& e) {
    say({{"fatal", e.what()}, {"usage", false}});
    finish(0);
  }
  const DeviceDescription device = backend->device();
  say({{"backend", backend->name()},
       {"notes", notes},
       {"device", describe_device(device)},
       {"device_count", device_count}});
  LineReader requests(socket);
  while (const std::optional<std::string> line = requests.next()) {
    json answer;
    try {
      answer = answer_request(json::parse(*line), cases, replay, *backend, options, backend_options);
    } catch (const UsageError& e) {  // e.g. a bundle directory that is not empty
      answer = {{"error", e.what()}, {"usage", true}};
    } catch (const std::exception& e) {
      answer = {{"error", e.what()}, {"usage", false}};
    }
    // A lost CUDA context would fail every later case here: the parent starts a fresh worker.
    answer["restart"] = !backend->usable();
    say(answer);
  }
  finish(0);
}

// This process's ends of its workers' sockets. A child must close the ones it inherits: while
// a copy stays open elsewhere, a worker never sees its socket close and never exits.
std::vector<int>& open_worker_sockets() {
  static std::vector<int> sockets;
  return sockets;
}

class Worker {
 public:
  Worker(const std::vector<CaseSpec>& cases, const InputSource* replay, const WorkerBackendMaker& make_backend,
         const RunOptions& options, const BackendOptions& backend_options) {
    int sockets[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0)
      throw std::runtime_error(
          fmt::format("cannot make a socket pair for the worker process: {}", std::strerror(errno)));
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(sockets[0]);
      ::close(sockets[1]);
      throw std::runtime_error(fmt::format("cannot start a worker process: {}", std::strerror(errno)));
    }
    if (pid_ == 0) {
      ignore_interrupts();
      ::close(sockets[0]);
      for (const int other : open_worker_sockets()) ::close(other);
      serve(sockets[1], cases, replay, make_backend, options, backend_options);
    }
    ::close(sockets[1]);
    socket_ = sockets[0];
    open_worker_sockets().push_back(socket_);
    reader_.emplace(socket_);
  }
  ~Worker() {
    close_socket();
    reap();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int socket() const { return socket_; }
  long pid() const { return long(pid_); }
  // A whole message already received, if there is one.
  std::optional<json> buffered() {
    const std::optional<std::string> line = reader_->buffered();
    if (!line) return std::nullopt;
    return json::parse(*line);
  }
  // One read from the child; false once it is gone.
  bool read_more() { return reader_->read_more(); }
  bool request(const json& request) { return send_all(socket_, dump_json(request) + "\n"); }

  // Ends a child that gives no answer.
  void kill() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    close_socket();
    reap();
  }

  // How the child ended ("was killed by signal 11 (Segmentation fault)"), waiting for it.
  std::string ending() {
    close_socket();
    const int status = reap();
    if (WIFSIGNALED(status))
      return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    return "ended";
  }

 private:
  void close_socket() {
    if (socket_ < 0) return;
    std::vector<int>& open = open_worker_sockets();
    open.erase(std::remove(open.begin(), open.end(), socket_), open.end());
    ::close(socket_);
    socket_ = -1;
  }

  int reap() {
    if (pid_ <= 0) return 0;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  int socket_ = -1;
  std::optional<LineReader> reader_;
};

// When a worker's answer is due: `limit_seconds` (--timeout) after `start`; never for 0.
struct Deadline {
  double limit_seconds = 0;
  std::chrono::steady_clock::time_point start;

  bool passed() const { return limit_seconds > 0 && seconds_left() <= 0; }
  // What poll waits for it: -1 (no limit), else the milliseconds left, rounded up.
  int poll_milliseconds() const {
    return limit_seconds > 0 ? int(std::clamp(std::ceil(seconds_left() * 1000), 0.0, 3600e3)) : -1;
  }

 private:
  double seconds_left() const {
    return limit_seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

// The result of a case whose worker process was lost while running it (`how`).
CaseResult lost_case(const CaseSpec& spec, const std::string& backend, const std::string& device,
                     const std::string& kernel, const std::string& how, std::chrono::steady_clock::time_point start,
                     Disposition disposition = Disposition::error) {
  CaseResult r = unjudged_result(spec, backend, device, kernel, disposition, how);
  r.dispatch_reason = kernel.empty() ? "" : "--kernel " + kernel;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace

namespace {

// One worker process and the case it runs.
struct Slot {
  int device = -1;
  std::unique_ptr<Worker> worker;
  bool greeted = false, ever_greeted = false;
  std::optional<std::size_t> running;
  std::chrono::steady_clock::time_point start;
  std::string backend = "none", device_name = "none (no worker started)";
};

}  // namespace

std::string run_in_workers(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend, const WorkerPlan& plan,
                           const RunOptions& options, const std::function<void(int, int, const std::string&)>& progress,
                           const std::function<void(const CaseResult&)>& judged) {
  std::vector<Slot> slots;
  for (const int device : plan.devices.empty() ? std::vector<int>{-1} : plan.devices)
    slots.emplace_back().device = device;
  std::vector<std::optional<CaseResult>> done(cases.size());
  std::size_t next = 0, emitted = 0;
  std::string notes;
  bool started_once = false;
  int expand_to = 0;  // with plan.all_devices: the device count the first worker reported

  auto finish = [&](Slot& slot, CaseResult result) {
    done[*slot.running] = std::move(result);
    slot.running.reset();
    while (emitted < done.size() && done[emitted]) judged(*done[emitted++]);
  };
  auto lost = [&](Slot& slot, const std::string& what) {
    CaseResult r = lost_case(cases[*slot.running], slot.backend, slot.device_name, options.kernel, what, slot.start);
    slot.worker.reset();
    slot.greeted = false;
    finish(slot, std::move(r));
  };
  auto ask = [&](Slot& slot) {
    slot.start = std::chrono::steady_clock::now();  // the worker's start-up had a deadline of its own
    if (!slot.worker->request({{"index", *slot.running}}))
      lost(slot, fmt::format("the worker process running this case {}; a new worker runs the remaining cases",
                             slot.worker->ending()));
  };
  auto handle = [&](Slot& slot, const json& message) {
    if (slot.greeted) {
      if (message.contains("error")) {
        lost(slot, "the worker process could not run this case: " + message.at("error").get<std::string>());
        return;
      }
      finish(slot, result_from_json(message.at("result")));
      // A lost CUDA context would fail every later case there: a fresh worker takes over.
      if (message.at("restart").get<bool>()) slot.worker.reset();
      return;
    }
    if (message.contains("fatal")) {
      // A worker that could never start (a bad --kernel, a device that is not there) is the
      // run's error; a replacement that cannot start costs its case.
      const std::string text = message.at("fatal").get<std::string>();
      const bool usage = message.at("usage").get<bool>();
      if (!slot.ever_greeted && usage) throw UsageError(text);
      if (!started_once) throw std::runtime_error(text);
      lost(slot, "a new worker process could not start: " + text);
      return;
    }
    if (!started_once) {
      notes = message.at("notes").get<std::string>();
      if (plan.all_devices) expand_to = message.at("device_count").get<int>();
    }
    started_once = true;
    slot.greeted = slot.ever_greeted = true;
    slot.backend = message.at("backend").get<std::string>();
    slot.device_name = message.at("device").get<std::string>();
    if (plan.started) plan.started(slot.worker->pid(), slot.device_name);
    ask(slot);
  };

  while (emitted < cases.size()) {
    if (const int signal = interrupt_signal()) {
      // The cases in flight are abandoned; run_in_workers' caller marks the ones never started.
      for (Slot& slot : slots) {
        if (!slot.running) continue;
        if (slot.worker) slot.worker->kill();
        slot.worker.reset();
        finish(slot, lost_case(cases[*slot.running], slot.backend, slot.device_name, options.kernel,
                               interrupted_detail(signal), slot.start, Disposition::not_run));
      }
      break;
    }
    // "all": the first worker has said how many devices there are; one more worker per device.
    for (int device = int(slots.size()); device < expand_to; ++device) slots.emplace_back().device = device;
    expand_to = 0;
    for (Slot& slot : slots) {
      if (slot.running || next == cases.size()) continue;
      slot.running = next++;
      slot.start = std::chrono::steady_clock::now();
      if (progress) progress(int(*slot.running), int(cases.size()), cases[*slot.running].name);
      if (!slot.worker) {
        const int device = slot.device;
        const WorkerBackendMaker make = [&make_backend, device](std::string& n) { return make_backend(device, n); };
        slot.worker = std::make_unique<Worker>(cases, plan.replay, make, options, BackendOptions{});
        slot.greeted = false;
      } else {
        ask(slot);
      }
    }
    std::vector<pollfd> waiting;
    std::vector<Slot*> owners;
    for (Slot& slot : slots)
      if (slot.running && slot.worker) {
        waiting.push_back({slot.worker->socket(), POLLIN, 0});
        owners.push_back(&slot);
      }
    if (waiting.empty()) continue;
    // Wake for the earliest deadline of a running case (a worker starting up counts as its case).
    int wait_ms = -1;
    for (const Slot* slot : owners) {
      const int ms = Deadline{plan.case_timeout_seconds, slot->start}.poll_milliseconds();
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    if (::poll(waiting.data(), waiting.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("waiting for the worker processes: {}", std::strerror(errno)));
    }
    for (std::size_t i = 0; i < waiting.size(); ++i) {
      Slot& slot = *owners[i];
      if (!waiting[i].revents) {
        if (Deadline{plan.case_timeout_seconds, slot.start}.passed()) {
          const bool started = slot.greeted;
          slot.worker->kill();
          // A first worker that never starts would cost every case the same wait: the run's error.
          if (!started && !started_once)
            throw std::runtime_error(
                fmt::format("the worker process gave no answer within {} s of starting (--timeout) "
                            "and was killed",
                            plan.case_timeout_seconds));
          lost(slot, fmt::format("no answer within {} s (--timeout): the worker process {} was killed; a new worker "
                                 "runs the remaining cases",
                                 plan.case_timeout_seconds, started ? "running this case" : "starting up"));
        }
        continue;
      }
      if (!slot.worker->read_more()) {
        lost(slot, slot.greeted
                       ? fmt::format("the worker process running this case {}; a new worker runs the remaining cases",
                                     slot.worker->ending())
                       : fmt::format("the worker process {} before it could run a case", slot.worker->ending()));
        continue;
      }
      while (slot.worker && slot.running) {
        const std::optional<json> message = slot.worker->buffered();
        if (!message) break;
        handle(slot, *message);
      }
    }
  }
  return notes;
}

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
  WorkerRunner(WorkerBackendMaker make_backend, const BackendOptions& backend, RunOptions options, std::string& notes)
      : CaseRunner(std::move(options)), make_backend_(std::move(make_backend)), backend_options_(backend) {
    notes += start();
  }

  CaseResult run(const CaseSpec& spec, bool disable_layout_guard) override {
    return ask(spec, case_request(spec, disable_layout_guard), nullptr);
  }

  CaseResult write_bundle(const CaseSpec& spec, const std::filesystem::path& dir, bool force,
                          CommandOutput& out) override {
    json request = case_request(spec, options_.disable_layout_guard);
    request["bundle"] = {{"dir", dir.string()}, {"force", force}};
    const CaseResult result = ask(spec, request, &out);
    if (!lost_) return result;
    // The case took its worker down: a fresh one writes the bundle from that result, without
    // running the kernel again (the directory is already this command's).
    request["bundle"] = {{"dir", dir.string()}, {"force", true}, {"ended_elsewhere", result_json(result)}};
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

  // Forks a worker and waits for its greeting; a worker that cannot start is the command's error.
  std::string start() {
    worker_ = std::make_unique<Worker>(std::vector<CaseSpec>{}, nullptr, make_backend_, options_, backend_options_);
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
      return lost_case(spec, backend_, device_, options_.kernel,
                       fmt::format("the worker process running this case {}; a new worker runs the next case", how),
                       started_);
    }
    // A lost CUDA context would fail every later case there: a fresh worker takes over.
    if (answer->at("restart").get<bool>()) worker_.reset();
    if (answer->contains("error")) throw_worker_error(*answer, "error");
    if (out && answer->contains("text")) {
      out->text += answer->at("text").get<std::string>();
      out->notes += answer->at("notes").get<std::string>();
    }
    return result_from_json(answer->at("result"));
  }

  WorkerBackendMaker make_backend_;
  BackendOptions backend_options_;
  std::unique_ptr<Worker> worker_;
  std::chrono::steady_clock::time_point started_;
  std::string backend_ = "none", device_ = "none";
  bool lost_ = false;  // the last case took its worker down
};

}  // namespace

std::unique_ptr<CaseRunner> make_worker_runner(const BackendMaker& make_backend, const BackendOptions& backend,
                                               const RunOptions& options, std::string& notes) {
  const WorkerBackendMaker make = [make_backend](std::string& n) { return make_backend(-1, n); };
  return std::make_unique<WorkerRunner>(make, backend, options, notes);
}

}  // namespace attnres
