#include "app/workers/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/engine/interrupt.h"

namespace attnres {

namespace {

// This process's ends of its workers' sockets. A child must close the ones it inherits: while
// a copy stays open elsewhere, a worker never sees its socket close and never exits.
std::vector<int>& open_worker_sockets() {
  static std::vector<int> sockets;
  return sockets;
}

// A connected pair: [0] this process's end, [1] the child's.
std::array<int, 2> socket_pair() {
  std::array<int, 2> sockets{};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets.data()) != 0)
    throw std::runtime_error(fmt::format("cannot make a socket pair for the worker process: {}", std::strerror(errno)));
  return sockets;
}

}  // namespace

WorkerProcess::WorkerProcess(const std::vector<CaseSpec>& cases, const InputSource* replay,
                             const WorkerBackendMaker& make_backend, const RunOptions& options,
                             const BackendOptions& backend_options) {
  const std::array<int, 2> sockets = socket_pair();
  fork_child(sockets, [&] {
    ignore_interrupts();
    ::close(sockets[0]);
    for (const int other : open_worker_sockets()) ::close(other);
    serve_requests(sockets[1], cases, replay, make_backend, options, backend_options);
  });
}

WorkerProcess::WorkerProcess(const std::function<std::vector<std::string>(int socket)>& command) {
  const std::array<int, 2> sockets = socket_pair();
  // Everything the child needs is made before the fork: after it, the child only calls exec.
  std::vector<std::string> words;
  try {
    words = command(sockets[1]);
  } catch (...) {
    ::close(sockets[0]);
    ::close(sockets[1]);
    throw;
  }
  std::vector<char*> argv;
  for (const std::string& word : words) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  fork_child(sockets, [&] {
    ::setpgid(0, 0);                  // its own group: killing it also ends the processes it starts
    ::fcntl(sockets[1], F_SETFD, 0);  // the one descriptor the program inherits
    ::execv(argv[0], argv.data());
    _exit(127);
  });
  own_group_ = true;
  ::setpgid(pid_, pid_);  // also here, so that kill() never finds the group missing
}

void WorkerProcess::fork_child(const std::array<int, 2>& sockets, const std::function<void()>& child) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(sockets[0]);
    ::close(sockets[1]);
    throw std::runtime_error(fmt::format("cannot start a worker process: {}", std::strerror(errno)));
  }
  if (pid_ == 0) child();
  ::close(sockets[1]);
  socket_ = sockets[0];
  open_worker_sockets().push_back(socket_);
  reader_.emplace(socket_);
}

WorkerProcess::~WorkerProcess() {
  close_socket();
  reap();
}

std::optional<nlohmann::json> WorkerProcess::buffered() {
  const std::optional<std::string> line = reader_->buffered();
  if (!line) return std::nullopt;
  return nlohmann::json::parse(*line);
}

bool WorkerProcess::request(const nlohmann::json& request) { return send_all(socket_, dump_json(request) + "\n"); }

void WorkerProcess::kill() {
  if (pid_ > 0) ::kill(own_group_ ? -pid_ : pid_, SIGKILL);
  close_socket();
  reap();
}

std::string WorkerProcess::ending() {
  close_socket();
  const int status = reap();
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

std::optional<int> WorkerProcess::finish(double seconds) {
  close_socket();
  if (pid_ <= 0) return std::nullopt;
  const Deadline due{seconds, std::chrono::steady_clock::now()};
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) break;
    if (done < 0 && errno != EINTR) return std::nullopt;
    if (due.passed()) {
      kill();
      return std::nullopt;
    }
    ::usleep(10000);
  }
  pid_ = -1;
  return WIFEXITED(status) ? std::optional<int>(WEXITSTATUS(status)) : std::nullopt;
}

void WorkerProcess::close_socket() {
  if (socket_ < 0) return;
  std::vector<int>& open = open_worker_sockets();
  open.erase(std::remove(open.begin(), open.end(), socket_), open.end());
  ::close(socket_);
  socket_ = -1;
}

int WorkerProcess::reap() {
  if (pid_ <= 0) return 0;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
  pid_ = -1;
  return status;
}

CaseResult lost_case(const CaseSpec& spec, const std::string& backend, const std::string& device,
                     const std::string& kernel, const std::string& how, std::chrono::steady_clock::time_point start,
                     Disposition disposition) {
  CaseResult r = unjudged_result(spec, backend, device, kernel, disposition, how);
  r.dispatch_reason = kernel.empty() ? "" : "--kernel " + kernel;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace attnres
