// Helpers shared by the test files: temporary directories and small cases.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "app/case_spec.h"

namespace attnres::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "attnres-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

// A fresh seed per call: kernels must agree with the reference on any input, not one.
inline std::uint64_t fresh_seed() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine();
}

inline std::string source_path(const std::string& relative) { return std::string(ATTNRES_SOURCE_DIR) + "/" + relative; }

}  // namespace attnres::testing
