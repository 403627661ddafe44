// Files the tool writes: reports and bundles are never left half-written, and a bundle
// directory is never shared by two runs.
#pragma once
#include <filesystem>
#include <string>

namespace attnres {

// Writes `content` to a temporary file beside `path`, then renames it over `path`: a reader
// sees the old file or the whole new one, and a failed write (a full disk) leaves no file
// that looks valid. Throws std::runtime_error naming the path and the reason.
void write_file_atomically(const std::string& path, const std::string& content);

// Throws std::runtime_error unless a file can be created beside `path` (checked by creating
// and removing one), so a run can refuse a bad report path before it does any work.
void require_writable(const std::string& path);

// An exclusive lock on a directory for as long as this object lives (flock on the directory
// itself); throws std::runtime_error when another process holds it.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::filesystem::path& dir);
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  DirectoryLock& operator=(DirectoryLock&&) = delete;

 private:
  int fd_ = -1;
};

// Creates `dir` if needed and locks it. A directory that holds anything is refused unless
// `force`, which empties it first (so no stale file of an earlier bundle survives).
DirectoryLock claim_output_directory(const std::filesystem::path& dir, bool force);

}  // namespace attnres
