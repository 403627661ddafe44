#include "app/workers/ipc.h"

#include <sys/socket.h>

#include <cerrno>

namespace attnres {

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

std::optional<std::string> LineReader::next() {
  for (;;) {
    if (std::optional<std::string> line = buffered()) return line;
    if (!read_more()) return std::nullopt;
  }
}

std::optional<std::string> LineReader::buffered() {
  const std::size_t end = buffer_.find('\n');
  if (end == std::string::npos) return std::nullopt;
  std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 1);
  return line;
}

bool LineReader::read_more() {
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::recv(socket_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(chunk, std::size_t(n));
    return true;
  }
}

}  // namespace attnres
