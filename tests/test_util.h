// Helpers shared by the test files: temporary directories and small cases.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/engine/runner.h"

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

// A fresh seed per call (kernels must agree with the reference on any input, not one), printed
// so that a failure can be replayed: ATTNRES_TEST_SEED=<seed> makes every call return it.
inline std::uint64_t fresh_seed() {
  static std::mt19937_64 engine{std::random_device{}()};
  const char* fixed = std::getenv("ATTNRES_TEST_SEED");
  const std::uint64_t seed = fixed && *fixed ? std::stoull(fixed) : engine();
  std::fprintf(stderr, "seed %llu (ATTNRES_TEST_SEED=%llu replays it)\n", static_cast<unsigned long long>(seed),
               static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

inline std::string source_path(const std::string& relative) { return std::string(ATTNRES_SOURCE_DIR) + "/" + relative; }

// A command line as main would run it (without the program name).
inline CommandOutput run_cli(const std::vector<std::string>& args) { return execute(parse(args), nullptr); }

// The message of the UsageError a command line raises ("no usage error" where it raises none).
inline std::string usage_error(const std::vector<std::string>& args) {
  try {
    run_cli(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no usage error";
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The seed repro on any backend: guarded it is refused with the exact message; unguarded the
// kernel runs and corrupts silently (large error, no NaN/Inf, prefix padding overwritten).
// Returns the unguarded result for backend-specific checks.
inline CaseResult expect_unguarded_seed_repro_corrupts_silently(Backend& backend) {
  const LoadedCases loaded = load_cases({source_path("cases/guard.json")});
  const CaseSpec& seed = loaded.cases.at(0);
  EXPECT_EQ(seed.name, "seed-repro-prefix-stride-7175");
  EXPECT_EQ(run_case(seed, backend, RunOptions{}).disposition, Disposition::rejected_as_expected);
  RunOptions unguarded;
  unguarded.disable_layout_guard = true;
  const CaseResult r = run_case(seed, backend, unguarded);
  EXPECT_EQ(r.disposition, Disposition::not_rejected) << r.detail;
  EXPECT_FALSE(r.layout_guard);
  if (!r.comparison || r.violations.empty()) {
    ADD_FAILURE() << "the unguarded kernel did not run or left no trace: " << r.detail;
    return r;
  }
  EXPECT_GT(r.comparison->max_abs_error, 3.0);  // order of 6 against atol 0.08
  EXPECT_EQ(r.comparison->nan_count, 0);
  EXPECT_EQ(r.comparison->inf_count, 0);
  EXPECT_GT(r.comparison->prefix_mismatches, 0);
  EXPECT_EQ(r.violations[0].tensor, "prefix");
  EXPECT_EQ(r.violations[0].kind, "padding canary overwritten");
  return r;
}

}  // namespace attnres::testing
