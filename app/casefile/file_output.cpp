#include "app/casefile/file_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

namespace attnres {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path, what, std::strerror(error)));
}

std::string temporary_beside(const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  return (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
}

// All of `size` bytes, or the errno that stopped the write.
int write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return errno;
    if (written == 0) return ENOSPC;
    data += written;
    size -= std::size_t(written);
  }
  return 0;
}

// Devices, FIFOs and the /dev and /proc names of open files (/dev/stdout) are streams: written
// in place, never replaced by a file of the tool's.
bool is_stream_path(const std::string& path) {
  if (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0) return true;
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode) && !S_ISDIR(status.st_mode);
}

void write_stream(const std::string& path, const std::string& content) {
  // Non-blocking to open: a FIFO that no process reads is an error, not a hang.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENXIO) throw std::runtime_error(fmt::format("{}: no process is reading it", path));
    fail(path, "cannot open", errno);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  int error = flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? errno : 0;
  if (!error) error = write_all(fd, content.data(), content.size());
  if (::close(fd) != 0 && !error && errno != EINTR) error = errno;
  if (error) fail(path, "cannot write", error);
}

// Where a report path leads: itself, or for a symlink the regular file it names. A dangling
// symlink and a directory are refused.
std::string report_target(const std::string& path) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0) return path;  // a new file (or a missing directory: the write says so)
  if (S_ISDIR(link.st_mode)) throw std::runtime_error(fmt::format("{}: is a directory, not a file", path));
  if (!S_ISLNK(link.st_mode)) return path;
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0)
    throw std::runtime_error(
        fmt::format("{}: is a symlink to a file that does not exist ({}); refused: give the target's path", path,
                    std::strerror(errno)));
  if (S_ISDIR(target.st_mode))
    throw std::runtime_error(fmt::format("{}: is a symlink to a directory, not a file", path));
  char resolved[PATH_MAX];
  if (!::realpath(path.c_str(), resolved)) fail(path, "cannot resolve the symlink", errno);
  return resolved;
}

struct FileIdentity {
  std::optional<std::pair<dev_t, ino_t>> inode;  // an existing file
  std::string path;                              // else where it would be made
  bool operator==(const FileIdentity& other) const {
    return inode || other.inode ? inode == other.inode : path == other.path;
  }
};

FileIdentity identify(const std::string& path) {
  struct stat status {};
  const bool exists =
      is_standard_output(path) ? ::fstat(STDOUT_FILENO, &status) == 0 : ::stat(path.c_str(), &status) == 0;
  if (exists) return {std::pair{status.st_dev, status.st_ino}, ""};
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return {std::nullopt, ec ? path : absolute.string()};
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temporary_(temporary_beside(path_)) {
  // mkostemp creates with O_CREAT|O_EXCL: a name planted there, a symlink included, fails the
  // create instead of being written through.
  fd_ = ::mkostemp(temporary_.data(), O_CLOEXEC);
  if (fd_ < 0) fail(path_, "cannot create a file beside it", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (fd_ < 0) throw std::logic_error(fmt::format("{}: written after it was committed", path_));
  if (const int error = write_all(fd_, static_cast<const char*>(data), size)) fail(path_, "cannot write", error);
}

void AtomicFile::commit() {
  int error = ::fsync(fd_) != 0 ? errno : 0;
  // Written files get the usual permissions (mkostemp makes them 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (!error && ::fchmod(fd_, 0666 & ~mask) != 0) error = errno;
  if (::close(fd_) != 0 && !error && errno != EINTR) error = errno;
  fd_ = -1;
  // rename replaces a symlink at path_ itself, never the file it names.
  if (!error && std::rename(temporary_.c_str(), path_.c_str()) != 0) error = errno;
  if (error) {
    ::unlink(temporary_.c_str());
    fail(path_, "cannot write", error);
  }
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

bool is_standard_output(const std::string& path) { return path == "-"; }

void write_report_file(const std::string& path, const std::string& content) {
  if (is_standard_output(path)) throw std::logic_error("standard output is printed by the caller");
  if (is_stream_path(path)) return write_stream(path, content);
  write_file_atomically(report_target(path), content);
}

void require_writable(const std::string& path) {
  if (is_standard_output(path)) return;
  if (is_stream_path(path)) {
    if (::access(path.c_str(), W_OK) != 0) fail(path, "cannot write there", errno);
    return;
  }
  const std::string target = report_target(path);
  std::string temporary = temporary_beside(target);
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) fail(path, "cannot write there", errno);
  ::close(fd);
  ::unlink(temporary.c_str());
}

void require_distinct_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  std::vector<std::pair<const NamedPath*, FileIdentity>> input_identities;
  for (const NamedPath& input : inputs)
    if (!input.second.empty()) input_identities.emplace_back(&input, identify(input.second));
  std::vector<std::pair<const NamedPath*, FileIdentity>> seen;
  for (const NamedPath& output : outputs) {
    if (output.second.empty()) continue;
    const FileIdentity identity = identify(output.second);
    for (const auto& [other, other_identity] : seen)
      if (identity == other_identity)
        throw std::invalid_argument(
            fmt::format("{} and {} name the same file ({}): each report needs a file of its own", other->first,
                        output.first, output.second));
    for (const auto& [input, input_identity] : input_identities)
      if (input_identity == identity)
        throw std::invalid_argument(fmt::format("{} {} is the {} {}: refused, so that the input is not overwritten",
                                                output.first, output.second, input->first, input->second));
    seen.emplace_back(&output, identity);
  }
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

const std::vector<std::string>& bundle_file_names() {
  static const std::vector<std::string> names{kBundleMarker,        "REPORT.md",          "case.json",
                                              "original-case.json", "inputs.safetensors", "outputs.safetensors",
                                              "error-map.png",      "environment.json",   "result.json",
                                              "replay.sh",          "repro.py",           "attnres_binding.py"};
  return names;
}

DirectoryLock claim_output_directory(const fs::path& dir, bool force) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create directory: {}", dir.string(), ec.message()));
  DirectoryLock lock(dir);
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot read directory: {}", dir.string(), ec.message()));
  std::vector<std::string> entries;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw std::runtime_error(fmt::format("{}: cannot read directory: {}", dir.string(), ec.message()));
    entries.push_back(it->path().filename().string());
  }
  std::sort(entries.begin(), entries.end());
  const std::string marker = (dir / kBundleMarker).string();
  if (!entries.empty()) {
    if (!force)
      throw std::runtime_error(
          fmt::format("{}: directory is not empty (holds {}); --force empties it first if it holds "
                      "a bundle of this tool's",
                      dir.string(), entries.front()));
    if (std::find(entries.begin(), entries.end(), kBundleMarker) == entries.end())
      throw std::runtime_error(
          fmt::format("{}: not a bundle directory of this tool's (no {}; it holds {}): --force empties only "
                      "those, and nothing was removed",
                      dir.string(), kBundleMarker, entries.front()));
    const std::vector<std::string>& known = bundle_file_names();
    for (const std::string& name : entries) {
      struct stat status {};
      const std::string path = (dir / name).string();
      const bool regular = ::lstat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode);
      const char* what = !regular                                                     ? "which is not a regular file"
                         : std::find(known.begin(), known.end(), name) == known.end() ? "which no bundle holds"
                                                                                      : nullptr;
      if (what)
        throw std::runtime_error(
            fmt::format("{}: holds {}, {}: --force empties only a bundle of this tool's, and nothing "
                        "was removed",
                        dir.string(), name, what));
    }
    for (const std::string& name : entries)
      if (name != kBundleMarker && ::unlink((dir / name).c_str()) != 0)
        fail((dir / name).string(), "cannot remove", errno);
  }
  if (entries.empty())
    write_file_atomically(marker, "This directory holds a bundle of attnres-check's; repro --force may empty it.\n");
  return lock;
}

}  // namespace attnres
