#include "app/file_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace attnres {

namespace fs = std::filesystem;

namespace {

std::string temporary_beside(const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  return (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path, what, std::strerror(error)));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  std::string temporary = temporary_beside(path);
  const int fd = mkstemp(temporary.data());
  if (fd < 0) fail(path, "cannot create a file beside it", errno);
  const char* data = content.data();
  std::size_t left = content.size();
  int error = 0;
  while (left > 0 && !error) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) error = written < 0 ? errno : ENOSPC;
    else data += written, left -= std::size_t(written);
  }
  if (!error && fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && !error) error = errno;
  // Written files get the usual permissions (mkstemp makes them 0600).
  if (!error) {
    const mode_t mask = umask(0);
    umask(mask);
    if (chmod(temporary.c_str(), 0666 & ~mask) != 0) error = errno;
  }
  if (!error && std::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error) {
    ::unlink(temporary.c_str());
    fail(path, "cannot write", error);
  }
}

void require_writable(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::runtime_error(fmt::format("{}: is a directory, not a file", path));
  std::string temporary = temporary_beside(path);
  const int fd = mkstemp(temporary.data());
  if (fd < 0) fail(path, "cannot write there", errno);
  ::close(fd);
  ::unlink(temporary.c_str());
}

DirectoryLock::DirectoryLock(const fs::path& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) fail(dir.string(), "cannot open directory", errno);
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    if (error == EWOULDBLOCK)
      throw std::runtime_error(fmt::format("{}: another attnres-check is writing a bundle there", dir.string()));
    fail(dir.string(), "cannot lock directory", error);
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

DirectoryLock claim_output_directory(const fs::path& dir, bool force) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create directory: {}", dir.string(), ec.message()));
  DirectoryLock lock(dir);
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot read directory: {}", dir.string(), ec.message()));
  std::vector<fs::path> entries;
  for (; it != fs::directory_iterator(); ++it) entries.push_back(it->path());
  if (!entries.empty() && !force)
    throw std::runtime_error(fmt::format("{}: directory is not empty (holds {}); --force empties it first", dir.string(),
                                         entries.front().filename().string()));
  for (const fs::path& entry : entries) {
    fs::remove_all(entry, ec);
    if (ec) throw std::runtime_error(fmt::format("{}: cannot remove: {}", entry.string(), ec.message()));
  }
  return lock;
}

}  // namespace attnres
