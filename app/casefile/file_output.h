// Every file the tool writes goes through here: nothing is written through a symlink planted
// where the tool writes, a device or FIFO given as a report path is written as a stream and never
// replaced, and a half-written file never takes the place of a whole one.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace attnres {

// A file made beside `path` under an unpredictable name (created O_EXCL|O_NOFOLLOW, so nothing
// planted there is written through), filled by write(), and renamed over `path` by commit(). A
// reader sees the old file or the whole new one; destroyed uncommitted, the temporary is removed.
// Errors throw std::runtime_error naming `path` and the reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void commit();

 private:
  std::string path_, temporary_;
  int fd_ = -1;
};

// Writes a whole file through AtomicFile.
void write_file_atomically(const std::string& path, const std::string& content);

// The path a user gave for a report: "-" is standard output (the caller prints it; see
// write_report_file); a path under /dev or /proc, or one that is a character device or FIFO, is
// opened and written as a stream; a symlink to a regular file is replaced at its target (the link
// stays); a dangling symlink or a directory is refused; anything else is written atomically.
bool is_standard_output(const std::string& path);
void write_report_file(const std::string& path, const std::string& content);

// Throws std::runtime_error unless write_report_file(path) can be expected to work (for a regular
// file: a file can be created beside it), so a run can refuse a bad path before it does any work.
void require_writable(const std::string& path);

// Refuses (std::invalid_argument naming both) two outputs that name one file, and an output that
// names one of the run's input files: each pair is the same existing file, or the same path.
// `outputs` and `inputs` are (option or role, path) pairs; empty paths are ignored.
using NamedPath = std::pair<std::string, std::string>;
void require_distinct_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

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

// The file that marks a directory as a bundle this tool wrote, and the names a bundle holds.
constexpr const char* kBundleMarker = ".attnres-check-bundle";
const std::vector<std::string>& bundle_file_names();

// Creates `dir` if needed, locks it and marks it as a bundle. A directory that holds anything is
// refused unless `force`; with it, only a directory this tool marked, holding nothing but regular
// files of a bundle's names, is emptied (so no stale file of an earlier bundle survives) and
// anything else is refused, naming what is there.
DirectoryLock claim_output_directory(const std::filesystem::path& dir, bool force);

}  // namespace attnres
