// Where an installed attnres-check finds its own files: relative to its executable, so an
// installed tree can be moved (bin/attnres-check, lib/attnres-check/, share/attnres-check/).
#pragma once
#include <filesystem>

namespace attnres {

// The directory holding the running executable; empty where /proc/self/exe cannot be read.
inline std::filesystem::path executable_directory() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace attnres
