// Copying a C++ string into a bridge's fixed-size, NUL-terminated text buffer (shared by the
// bridges; header-only so that each bridge library stays one translation unit of its own).
#pragma once
#include <cstring>
#include <string>

namespace attnres::bridge {

inline void copy_text(char* buffer, std::size_t capacity, const std::string& text) {
  if (!buffer || capacity == 0) return;
  const std::size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

}  // namespace attnres::bridge
