#include "app/casefile/file_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace attnres {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Up to `count` bytes, fewer only at the end of the file; -1 on an error (errno says which).
ssize_t read_some(int fd, char* data, std::size_t count) {
  std::size_t done = 0;
  while (done < count) {
    const ssize_t got = ::read(fd, data + done, count - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += std::size_t(got);
  }
  return ssize_t(done);
}

}  // namespace

RegularFile::RegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO to read would otherwise wait for a writer.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0) throw std::runtime_error(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat status {};
  const int error = ::fstat(fd_, &status) != 0 ? errno : 0;
  if (error || !S_ISREG(status.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    if (error) throw std::runtime_error(fmt::format("cannot read: {}", std::strerror(error)));
    throw std::runtime_error(fmt::format("is {}: only regular files are read", kind_of(status.st_mode)));
  }
  size_ = std::uint64_t(status.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all() {
  std::string text(size_, '\0');
  const ssize_t got = read_some(fd_, text.data(), text.size());
  if (got < 0) throw std::runtime_error(fmt::format("cannot read: {}", std::strerror(errno)));
  text.resize(std::size_t(got));
  return text;
}

RegularFileBuffer::int_type RegularFileBuffer::underflow() {
  const ssize_t got = read_some(fd_, buffer_, sizeof buffer_);
  if (got <= 0) return traits_type::eof();
  setg(buffer_, buffer_, buffer_ + got);
  return traits_type::to_int_type(buffer_[0]);
}

std::streamsize RegularFileBuffer::xsgetn(char* data, std::streamsize count) {
  // What is buffered first, then large reads straight into the caller's memory.
  std::streamsize done = std::min<std::streamsize>(count, egptr() - gptr());
  if (done > 0) {  // nothing buffered yet: gptr() is null
    std::memcpy(data, gptr(), std::size_t(done));
    gbump(int(done));
  }
  if (done < count) {
    const ssize_t got = read_some(fd_, data + done, std::size_t(count - done));
    if (got > 0) done += got;
  }
  return done;
}

RegularFileBuffer::pos_type RegularFileBuffer::seekoff(off_type offset, std::ios_base::seekdir from,
                                                       std::ios_base::openmode) {
  // The descriptor is ahead of the reader by what is still buffered.
  if (from == std::ios_base::cur) offset -= off_type(egptr() - gptr());
  const int whence = from == std::ios_base::beg ? SEEK_SET : from == std::ios_base::cur ? SEEK_CUR : SEEK_END;
  const off_t at = ::lseek(fd_, off_t(offset), whence);
  setg(buffer_, buffer_, buffer_);
  return at < 0 ? pos_type(off_type(-1)) : pos_type(off_type(at));
}

RegularFileBuffer::pos_type RegularFileBuffer::seekpos(pos_type position, std::ios_base::openmode which) {
  return seekoff(off_type(position), std::ios_base::beg, which);
}

}  // namespace attnres
