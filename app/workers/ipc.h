// The sockets between the tool and its worker processes: whole messages, one line each.
#pragma once
#include <optional>
#include <string>

namespace attnres {

// Writes all of `text`; false when the peer is gone (no SIGPIPE: MSG_NOSIGNAL).
bool send_all(int socket, const std::string& text);

// Lines from a socket: next() blocks for one; buffered() and read_more() let a caller poll
// several sockets.
class LineReader {
 public:
  explicit LineReader(int socket) : socket_(socket) {}
  // The next line, or nothing once the peer has closed the socket.
  std::optional<std::string> next();
  // A whole line already received, if there is one.
  std::optional<std::string> buffered();
  // One read; false once the peer has closed the socket.
  bool read_more();

 private:
  int socket_;
  std::string buffer_;
};

}  // namespace attnres
