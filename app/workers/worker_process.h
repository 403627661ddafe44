// One worker process as the tool sees it: forked with a socket pair, asked and answered in JSON
// lines (worker_protocol.h), killed and reaped; and what the scheduler and the one-at-a-time runner
// share about a worker that does not answer in time or is lost.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/workers/ipc.h"
#include "app/workers/worker_protocol.h"

namespace attnres {

class WorkerProcess {
 public:
  // Forks the child, which serves `cases` (worker_protocol.h); throws std::runtime_error when no
  // process or socket can be made.
  WorkerProcess(const std::vector<CaseSpec>& cases, const InputSource* replay, const WorkerBackendMaker& make_backend,
                const RunOptions& options, const BackendOptions& backend_options);
  // Starts `command` (command[0] a path) in a process group of its own, the socket's descriptor
  // number appended to its words; the program serves as serve_requests does. Throws
  // std::runtime_error when no process or socket can be made; a program that cannot be started
  // ends with status 127.
  explicit WorkerProcess(const std::function<std::vector<std::string>(int socket)>& command);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  int socket() const { return socket_; }
  long pid() const { return long(pid_); }
  // A whole message already received, if there is one.
  std::optional<nlohmann::json> buffered();
  // One read from the child; false once it is gone.
  bool read_more() { return reader_->read_more(); }
  bool request(const nlohmann::json& request);
  // Ends a child that gives no answer (with the process group it leads, for a started program).
  void kill();
  // How the child ended ("was killed by signal 11 (Segmentation fault)"), waiting for it.
  std::string ending();
  // Closes the socket (a worker then exits) and waits up to `seconds` (0: no limit) for the child
  // to end, killing it past that. Its exit status; nothing where it did not exit by itself.
  std::optional<int> finish(double seconds);

 private:
  // Forks; the child runs `child`, which never returns. Here: this process's end of `sockets`.
  void fork_child(const std::array<int, 2>& sockets, const std::function<void()>& child);
  void close_socket();
  int reap();

  pid_t pid_ = -1;
  bool own_group_ = false;  // a started program leads a process group, killed whole
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
                     Disposition disposition = Disposition::error);

}  // namespace attnres
