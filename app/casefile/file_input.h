// Files the tool reads from users: only regular files are opened (a FIFO would block for ever,
// a device never ends), and each is read through the descriptor that was checked.
#pragma once
#include <cstdint>
#include <ios>
#include <streambuf>
#include <string>

namespace attnres {

// A regular file opened to read. Opening fails for anything else, before a byte is read. Errors
// are std::runtime_error saying why; the caller names the file.
class RegularFile {
 public:
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  std::uint64_t size() const { return size_; }
  // The whole file.
  std::string read_all();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// A stream buffer over a RegularFile's descriptor, for parsers that take a std::istream.
class RegularFileBuffer : public std::streambuf {
 public:
  explicit RegularFileBuffer(const RegularFile& file) : fd_(file.fd()) {}

 protected:
  int_type underflow() override;
  std::streamsize xsgetn(char* data, std::streamsize count) override;
  pos_type seekoff(off_type offset, std::ios_base::seekdir from, std::ios_base::openmode which) override;
  pos_type seekpos(pos_type position, std::ios_base::openmode which) override;

 private:
  int fd_;
  char buffer_[1 << 16];
};

}  // namespace attnres
