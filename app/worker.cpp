#include "app/worker.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "app/cli.h"
#include "app/json_io.h"
#include "app/result_json.h"

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

// One line at a time from a socket; nothing once the peer has closed it.
class LineReader {
 public:
  explicit LineReader(int socket) : socket_(socket) {}
  std::optional<std::string> next() {
    for (;;) {
      const std::size_t end = buffer_.find('\n');
      if (end != std::string::npos) {
        std::string line = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        return line;
      }
      char chunk[65536];
      const ssize_t n = ::recv(socket_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, std::size_t(n));
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
[[noreturn]] void serve(int socket, const std::vector<CaseSpec>& cases, const BackendMaker& make_backend,
                        const RunOptions& options) {
  auto say = [&](const json& message) {
    if (!send_all(socket, dump_json(message) + "\n")) finish(1);
  };
  std::unique_ptr<Backend> backend;
  std::string notes;
  try {
    backend = make_backend(notes);
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
       {"device", describe_device(device)}});
  LineReader requests(socket);
  while (const std::optional<std::string> line = requests.next()) {
    const std::size_t index = std::stoul(*line);
    const CaseResult result = run_case(cases.at(index), *backend, options);
    // A lost CUDA context would fail every later case here: the parent starts a fresh worker.
    say({{"result", result_json(result)}, {"restart", !backend->usable()}});
  }
  finish(0);
}

class Worker {
 public:
  Worker(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend,
         const RunOptions& options) {
    int sockets[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0)
      throw std::runtime_error(fmt::format("cannot make a socket pair for the worker process: {}", std::strerror(errno)));
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(sockets[0]);
      ::close(sockets[1]);
      throw std::runtime_error(fmt::format("cannot start a worker process: {}", std::strerror(errno)));
    }
    if (pid_ == 0) {
      ::close(sockets[0]);
      serve(sockets[1], cases, make_backend, options);
    }
    ::close(sockets[1]);
    socket_ = sockets[0];
    reader_.emplace(socket_);
  }
  ~Worker() {
    if (socket_ >= 0) ::close(socket_);
    reap();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The next message, or nothing once the child is gone.
  std::optional<json> receive() {
    const std::optional<std::string> line = reader_->next();
    if (!line) return std::nullopt;
    return json::parse(*line);
  }
  bool request(std::size_t index) { return send_all(socket_, fmt::format("{}\n", index)); }

  // How the child ended ("was killed by signal 11 (Segmentation fault)"), waiting for it.
  std::string ending() {
    ::close(socket_);
    socket_ = -1;
    const int status = reap();
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    return "ended";
  }

 private:
  int reap() {
    if (pid_ <= 0) return 0;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  int socket_ = -1;
  std::optional<LineReader> reader_;
};

}  // namespace

std::string run_in_worker(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend, const RunOptions& options,
                          const std::function<void(int, int, const std::string&)>& progress,
                          const std::function<void(const CaseResult&)>& judged) {
  std::string notes, backend_name = "none", device = "none (no worker started)";
  std::unique_ptr<Worker> worker;
  bool started_once = false;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (progress) progress(int(i), int(cases.size()), cases[i].name);
    const auto start = std::chrono::steady_clock::now();
    auto lost = [&](const std::string& what) {
      CaseResult r;
      r.name = cases[i].name;
      r.location = cases[i].location();
      r.seed = cases[i].seed;
      r.backend = backend_name;
      r.device = device;
      r.kernel = options.kernel;
      r.dispatch_reason = "--kernel " + options.kernel;
      r.disposition = Disposition::error;
      r.detail = what;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      judged(r);
      worker.reset();
    };
    if (!worker) {
      worker = std::make_unique<Worker>(cases, make_backend, options);
      const std::optional<json> hello = worker->receive();
      if (!hello) {
        lost(fmt::format("the worker process {} before it could run a case", worker->ending()));
        continue;
      }
      if (hello->contains("fatal")) {
        const std::string message = hello->at("fatal").get<std::string>();
        if (!started_once) {
          if (hello->at("usage").get<bool>()) throw UsageError(message);
          throw std::runtime_error(message);
        }
        lost("a new worker process could not start: " + message);
        continue;
      }
      if (!started_once) notes = hello->at("notes").get<std::string>();
      started_once = true;
      backend_name = hello->at("backend").get<std::string>();
      device = hello->at("device").get<std::string>();
    }
    std::optional<json> reply;
    if (worker->request(i)) reply = worker->receive();
    if (!reply) {
      lost(fmt::format("the worker process running this case {}; a new worker runs the remaining cases", worker->ending()));
      continue;
    }
    judged(result_from_json(reply->at("result")));
    if (reply->at("restart").get<bool>()) worker.reset();
  }
  return notes;
}

}  // namespace attnres
