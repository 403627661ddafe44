// The reproductions of the "untrusted inputs" report, each a regression test: hostile case
// files, safetensors files and report paths give clear errors naming file and field, never a
// crash, a wrapped size, garbage passed as a result, or a lost report.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/casefile/safetensors.h"
#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/engine/memory_budget.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

using testing::read_file;
using testing::run_cli;

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

json small_case_json(const std::string& name) {
  return {{"schema_version", 1}, {"name", name}, {"T", 2}, {"H", 8}, {"max_blocks", 1}, {"num_blocks", 1}};
}

// A replayable file for small_case_json: T=2, H=8, MAXB=1, dense, with delta and output norm.
SafetensorsFile small_inputs() {
  SafetensorsFile file;
  auto bf16 = [](std::int64_t count) {
    std::vector<unsigned char> bytes;
    for (std::int64_t i = 0; i < count; ++i) {
      const bf16_bits b = float_to_bf16(0.25f * float(i % 7) - 0.5f);
      bytes.push_back(static_cast<unsigned char>(b));
      bytes.push_back(static_cast<unsigned char>(b >> 8));
    }
    return bytes;
  };
  file.tensors.push_back({"prefix", "BF16", {2, 8}, bf16(16)});
  file.tensors.push_back({"delta", "BF16", {2, 8}, bf16(16)});
  file.tensors.push_back({"blocks", "BF16", {2, 1, 8}, bf16(16)});
  file.tensors.push_back({"norm_weight", "BF16", {8}, bf16(8)});
  file.tensors.push_back({"qk_weight", "BF16", {8}, bf16(8)});
  file.tensors.push_back({"output_norm_weight", "BF16", {8}, bf16(8)});
  return file;
}

struct Replay {
  TempDir dir;
  std::string case_path, inputs_path, report_path;
  Replay() {
    case_path = dir.file("c.json", small_case_json("replay").dump());
    inputs_path = (dir.path() / "in.safetensors").string();
    report_path = (dir.path() / "report.json").string();
  }
  CommandOutput run(const SafetensorsFile& file, std::vector<std::string> extra = {}) {
    write_safetensors(inputs_path, file);
    std::vector<std::string> args{"run", case_path, "--inputs", inputs_path, "--backend", "cpu", "--json", report_path};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  }
};

// A bad --inputs file: exit 2, the note names the file and field, and the report is written.
void expect_bad_inputs(Replay& replay, const SafetensorsFile& file, const std::string& message) {
  const CommandOutput out = replay.run(file);
  EXPECT_EQ(out.exit_code, kExitBadInput) << out.text;
  EXPECT_NE(out.notes.find(replay.inputs_path + ": " + message), std::string::npos) << out.notes;
  const json report = json::parse(read_file(replay.report_path));
  ASSERT_EQ(report["load_errors"].size(), 1u);
  EXPECT_EQ(report["load_errors"][0]["file"], replay.inputs_path);
  EXPECT_TRUE(report["cases"].empty());
}

TEST(UntrustedSafetensors, StridesThatWrapSizesAreRefused) {
  Replay replay;
  SafetensorsFile file = small_inputs();
  // Shape [2^32, 8] with stride [2^32, 1]: (rows - 1) * stride and rows * stride wrap in int64.
  file.metadata["prefix.shape"] = "[4294967296, 8]";
  file.metadata["prefix.stride"] = "[4294967296, 1]";
  expect_bad_inputs(replay, file, "prefix: shape [4294967296, 8] needs T in [0, 2^31]");
  file.metadata["prefix.shape"] = "[2, 8]";
  file.metadata["prefix.stride"] = "[9223372036854775807, 1]";
  expect_bad_inputs(replay, file,
                    "prefix: shape [2, 8] with strides [9223372036854775807, 1] and storage offset 0 reaches past its "
                    "16 stored elements");
  file.metadata["prefix.stride"] = "[4611686018427387904, 1]";  // 2^62: the product overflows, not the stride
  expect_bad_inputs(replay, file, "prefix: shape [2, 8] with strides [4611686018427387904, 1]");
}

TEST(UntrustedSafetensors, ZeroDimensionalTensorIsAnError) {
  Replay replay;
  SafetensorsFile file = small_inputs();
  file.tensors[0].shape = {};
  file.tensors[0].bytes.resize(2);
  expect_bad_inputs(replay, file, "prefix: a 0-d tensor; expected [T, H], [T, MAXB, H] or [H]");
}

TEST(UntrustedSafetensors, HugeStorageOffsetIsAnErrorNotAPass) {
  Replay replay;
  SafetensorsFile file = small_inputs();
  file.metadata["prefix.storage_offset"] = "9223372036854775807";
  expect_bad_inputs(replay, file,
                    "prefix: shape [2, 8] with strides [8, 1] and storage offset 9223372036854775807 reaches past");
  file.metadata["prefix.storage_offset"] = "1";  // one element short at the end
  expect_bad_inputs(
      replay, file,
      "prefix: shape [2, 8] with strides [8, 1] and storage offset 1 reaches past its 16 stored elements");
}

TEST(UntrustedSafetensors, StorageOffsetsAreParsedStrictly) {
  Replay replay;
  for (const char* bad : {"0abc", " 8", "1.9", "-1", "+1", "", "99999999999999999999"}) {
    SafetensorsFile file = small_inputs();
    file.metadata["prefix.storage_offset"] = bad;
    expect_bad_inputs(
        replay, file,
        fmt::format("/__metadata__/prefix.storage_offset: must be a decimal integer in [0, 2^63), got \"{}\"", bad));
  }
  SafetensorsFile file = small_inputs();
  file.metadata["prefix.shape"] = "[2, 8.5]";
  expect_bad_inputs(replay, file, "/__metadata__/prefix.shape: must be a list of integers in [0, 2^63)");
}

TEST(UntrustedSafetensors, StoredChecksumsAreVerified) {
  TempDir dir;
  const std::string case_path = dir.file("c.json", small_case_json("bundle").dump());
  const fs::path bundle = dir.path() / "bundle";
  ASSERT_EQ(run_cli({"repro", case_path, "--out", bundle.string(), "--backend", "cpu"}).exit_code, kExitOk);
  const std::string inputs = (bundle / "inputs.safetensors").string();
  const std::string replay_report = (dir.path() / "r.json").string();
  ASSERT_EQ(run_cli({"run", case_path, "--inputs", inputs, "--backend", "cpu"}).exit_code, kExitOk);

  // Flip one bit of prefix's first element: bundles store prefix's data first, right after the header.
  std::string raw = read_file(inputs);
  std::uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= std::uint64_t(static_cast<unsigned char>(raw[std::size_t(i)])) << (8 * i);
  const json offsets = json::parse(raw.substr(8, header))["prefix"]["data_offsets"];
  ASSERT_EQ(offsets[0], 0);
  raw[8 + header] = char(raw[8 + header] ^ 0x01);
  std::ofstream(inputs, std::ios::binary) << raw;
  const CommandOutput flipped =
      run_cli({"run", case_path, "--inputs", inputs, "--backend", "cpu", "--json", replay_report});
  EXPECT_EQ(flipped.exit_code, kExitBadInput);
  EXPECT_NE(flipped.notes.find(inputs + ": /__metadata__/checksum.prefix: the data gives mix64sum:"), std::string::npos)
      << flipped.notes << flipped.text;
  EXPECT_NE(flipped.notes.find("(--no-verify-checksums replays it anyway)"), std::string::npos);
  EXPECT_EQ(json::parse(read_file(replay_report))["summary"]["load_errors"], 1);
  const CommandOutput anyway =
      run_cli({"run", case_path, "--inputs", inputs, "--backend", "cpu", "--no-verify-checksums"});
  EXPECT_EQ(anyway.exit_code, kExitOk) << anyway.notes;
}

// Bundles written before mix64sum carry FNV-1a 64 checksums: still verified, by their name.
TEST(UntrustedSafetensors, EarlierFnvChecksumsAreVerifiedAndUnknownKindsAreErrors) {
  CaseSpec spec = default_case("fnv", 3, 64, 2, 2);
  spec.seed = testing::fresh_seed();
  const CaseTensors tensors = make_case_tensors(spec);
  const SafetensorsFile written = inputs_file(spec, tensors);
  EXPECT_EQ(written.metadata.at("checksum.prefix"), checksum(tensors.prefix));
  EXPECT_EQ(checksum(tensors.prefix).rfind("mix64sum:", 0), 0u);
  Fnv1a64 fnv;
  for (std::int64_t row = 0; row < 3; ++row)
    for (std::int64_t col = 0; col < 64; ++col) fnv.add(tensors.prefix.at(row, col));
  auto replay_with = [&](const std::string& stored) {
    SafetensorsFile file = written;
    file.metadata["checksum.prefix"] = stored;
    CaseSpec replayed = spec;
    ReplayInputs(std::move(file), "in.safetensors", replayed, true);
  };
  EXPECT_NO_THROW(replay_with(fnv.text()));
  std::string wrong = fnv.text();
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  try {
    replay_with(wrong);
    FAIL() << "a wrong fnv1a64 checksum replayed";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("/__metadata__/checksum.prefix: the data gives " + fnv.text()),
              std::string::npos)
        << e.what();
  }
  try {
    replay_with("crc32:1234");
    FAIL() << "an unknown checksum kind replayed";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("\"crc32:1234\" is not a checksum this tool knows"), std::string::npos)
        << e.what();
  }
}

TEST(UntrustedSafetensors, DuplicateHeaderKeysAreErrors) {
  TempDir dir;
  const std::string header =
      R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}})";
  std::string length(8, '\0');
  length[0] = char(header.size());
  const std::string path = dir.file("dup.safetensors", length + header + std::string(2, '\0'));
  try {
    read_safetensors(path);
    ADD_FAILURE() << "no error";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": /a: header is not valid JSON: key \"a\" given twice");
  }
}

TEST(UntrustedCaseFiles, DuplicateKeysNameTheKeyAndItsPath) {
  TempDir dir;
  const std::string path =
      dir.file("dup.json",
               R"([{"schema_version": 1}, {"name": "x", "tensors": {"prefix": {"row_stride": 8, "row_stride": 9}}}])");
  const LoadedCases loaded = load_cases({path});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].to_string(), path + ": /1/tensors/prefix/row_stride: key \"row_stride\" given twice");
}

TEST(UntrustedCaseFiles, OneBadFileCostsOnlyItself) {
  TempDir dir;
  dir.file("cases/a.json", small_case_json("a").dump());
  const std::string huge =
      dir.file("cases/b.json",
               R"({"schema_version": 1, "name": "b", "T": 2, "H": 8, "max_blocks": 1, "num_blocks": 1, "eps": 1e400})");
  dir.file("cases/sub/c.json", small_case_json("c").dump());
  fs::create_directory_symlink(".", dir.path() / "cases" / "sub" / "loop");  // a loop back to sub
  fs::create_symlink("self.json", dir.path() / "cases" / "self.json");       // a symlink to itself
  const std::string report = (dir.path() / "r.json").string(), junit = (dir.path() / "r.xml").string();
  const CommandOutput out =
      run_cli({"run", (dir.path() / "cases").string(), "--backend", "cpu", "--json", report, "--junit", junit});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_NE(out.notes.find(huge + ": not valid JSON: "), std::string::npos) << out.notes;
  EXPECT_NE(out.notes.find((dir.path() / "cases" / "sub" / "loop").string() + ": symlink loop: leads back to"),
            std::string::npos)
      << out.notes;
  EXPECT_NE(out.notes.find((dir.path() / "cases" / "self.json").string() + ": symlink loop: skipped"),
            std::string::npos);
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["summary"]["total"], 2);  // a and c still ran
  EXPECT_EQ(r["summary"]["met_expectation"], 2);
  EXPECT_EQ(r["load_errors"].size(), 3u);
  EXPECT_NE(out.text.find("2 cases"), std::string::npos);
  EXPECT_NE(read_file(junit).find("name=\"c\""), std::string::npos);
}

// Runs `body` where directory permissions apply: as is, or (root reads everything) in a
// child process that became the unprivileged user 65534. Returns what body returned.
std::string without_root(const std::function<std::string()>& body) {
  if (geteuid() != 0) return body();
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    std::string text = (setgid(65534) == 0 && setuid(65534) == 0) ? body() : "setuid failed";
    const ssize_t written = ::write(fds[1], text.data(), text.size());
    _exit(written == ssize_t(text.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return text;
}

TEST(UntrustedCaseFiles, UnreadableDirectoryIsReportedAndTheWalkGoesOn) {
  TempDir dir;
  dir.file("cases/a/x.json", small_case_json("x").dump());
  dir.file("cases/b/y.json", small_case_json("y").dump());
  for (const fs::path& p : {dir.path(), dir.path() / "cases", dir.path() / "cases" / "b"})
    fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                           fs::perms::others_exec);
  fs::permissions(dir.path() / "cases" / "b" / "y.json",
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  fs::permissions(dir.path() / "cases" / "a", fs::perms::none);
  const std::string seen = without_root([&] {
    const LoadedCases loaded = load_cases({(dir.path() / "cases").string()});
    std::string text;
    for (const CaseLoadError& e : loaded.errors) text += "error " + e.to_string() + "\n";
    for (const CaseSpec& c : loaded.cases) text += "case " + c.name + "\n";
    return text;
  });
  fs::permissions(dir.path() / "cases" / "a", fs::perms::owner_all);
  EXPECT_EQ(seen,
            "error " + (dir.path() / "cases" / "a").string() + ": cannot read directory: Permission denied\ncase y\n");
}

TEST(UntrustedCaseFiles, NonUtf8PathsGiveValidJsonAndJunit) {
  TempDir dir;
  dir.file("cases/bad\xff\xfe-name.json", "{ not json");
  dir.file("cases/good.json", small_case_json("good").dump());
  const std::string report = (dir.path() / "r.json").string(), junit = (dir.path() / "r.xml").string();
  const CommandOutput out =
      run_cli({"run", (dir.path() / "cases").string(), "--backend", "cpu", "--json", report, "--junit", junit});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  const std::string report_text = read_file(report), junit_text = read_file(junit);
  EXPECT_EQ(valid_utf8(report_text), report_text);
  EXPECT_EQ(valid_utf8(junit_text), junit_text);
  const json r = json::parse(report_text);
  EXPECT_NE(r["load_errors"][0]["file"].get<std::string>().find("bad\xEF\xBF\xBD\xEF\xBF\xBD-name.json"),
            std::string::npos);
  EXPECT_NE(junit_text.find("bad\xEF\xBF\xBD\xEF\xBF\xBD-name.json"), std::string::npos);
  EXPECT_EQ(r["summary"]["met_expectation"], 1);
}

TEST(UntrustedCaseFiles, ControlCharactersAreEscapedAndTheSummaryStillPrints) {
  TempDir dir;
  json hostile = small_case_json("hostile");
  hostile["kernel"] = std::string("x\0\x1b[2J", 6);
  dir.file("cases/a\x1b]0;title\x07.json", hostile.dump());
  dir.file("cases/good.json", small_case_json("good").dump());
  const CommandOutput out = run_cli({"run", (dir.path() / "cases").string(), "--backend", "cpu"});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_NE(out.text.find("a\\u001b]0;title\\u0007.json: /kernel: must be one of"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("got \"x\\u0000\\u001b[2J\""), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find('\0'), std::string::npos);
  EXPECT_EQ(out.text.find('\x1b'), std::string::npos);
  EXPECT_NE(out.text.find("1 case, 1 passed, 1 bad case-file entry"), std::string::npos) << out.text;
}

TEST(Utf8, ControlCharactersArePrintableAndQuoted) {
  EXPECT_EQ(printable_lines("a\x1b[2Jb\n\tc\x7f"), "a\\u001b[2Jb\n\tc\\u007f");
  EXPECT_EQ(printable("a\x1b[2Jb\n\tc\x7f"), "a\\u001b[2Jb\\u000a\\u0009c\\u007f");
  EXPECT_EQ(printable("\xC2\x9B"
                      "1m \xC2\xA0"),
            "\\u009b1m \xC2\xA0");  // C1 CSI escaped, no-break space kept
  EXPECT_EQ(printable("bad\xff"), "bad\xEF\xBF\xBD");
  EXPECT_EQ(quoted_literal(std::string("x\0y", 3)), "\"x\\u0000y\"");
  EXPECT_EQ(quoted_literal("a\"b\\c\nd\te"), "\"a\\\"b\\\\c\\nd\\te\"");
  EXPECT_EQ(quoted_literal("Kimi K3 AttnRes requires densely packed rows"),
            "\"Kimi K3 AttnRes requires densely packed rows\"");
}

TEST(Utf8, InvalidSequencesAreReplaced) {
  EXPECT_EQ(valid_utf8("plain"), "plain");
  EXPECT_EQ(valid_utf8("\xC3\xA9"), "\xC3\xA9");                                                  // é stays
  EXPECT_EQ(valid_utf8("a\xC3"), "a\xEF\xBF\xBD");                                                // truncated
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                                  // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");                  // a UTF-16 surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // past U+10FFFF
}

TEST(MemoryBudget, CasesOverTheBudgetAreNotRunWithTheBytes) {
  TempDir dir;
  // T=3 rows 2^31 apart: 12.9 GB per copy of prefix alone.
  json wide = small_case_json("wide");
  wide["T"] = 3;
  wide["tensors"] = {{"prefix", {{"row_stride", std::int64_t(1) << 31}}}};
  json tall = small_case_json("tall");
  tall["T"] = std::int64_t(1) << 28;
  const std::string path = dir.file("big.json", json::array({wide, tall, small_case_json("small")}).dump());
  const std::string report = (dir.path() / "r.json").string();
  const CommandOutput out = run_cli({"run", path, "--backend", "cpu", "--max-host-memory", "1G", "--json", report});
  EXPECT_EQ(out.exit_code, kExitUnmet);
  const json r = json::parse(read_file(report));
  ASSERT_EQ(r["cases"].size(), 3u);
  for (int i : {0, 1}) {
    EXPECT_EQ(r["cases"][i]["disposition"], "not-run");
    EXPECT_NE(r["cases"][i]["detail"].get<std::string>().find(
                  "of host memory; the budget is 1073741824 bytes (1.0 GiB) (--max-host-memory)"),
              std::string::npos)
        << r["cases"][i]["detail"];
  }
  EXPECT_EQ(r["cases"][2]["disposition"], "passed");

  auto backend = make_cpu_backend(*parse_device_model("sm_90"), NativeImages{true, true});
  const CaseSpec spec = load_cases({path}).cases.at(0);
  const CaseFootprint need = case_footprint(spec, *backend, false);
  // Three copies of every tensor's storage (the kernel's, the reference's which ends as the
  // expected state, and the inputs as made; prefix alone: 3 * 2^31 elements of 2 bytes), the
  // output of the probe call, and the float64 output.
  ASSERT_TRUE(need.host_bytes);
  EXPECT_GT(*need.host_bytes, 3 * 3 * (std::int64_t(1) << 31) * 2);
  const std::int64_t output_bytes = case_layouts(spec.shape, spec.strides).back().storage_elements() * 2;
  EXPECT_EQ(*need.host_bytes, 3 * *case_storage_bytes(spec.shape, spec.strides) + output_bytes + 3 * 8 * 8);
  EXPECT_EQ(need.device_bytes, 0);
}

TEST(MemoryBudget, ByteSizesParseStrictly) {
  EXPECT_EQ(parse_byte_size("1073741824"), std::int64_t(1) << 30);
  EXPECT_EQ(parse_byte_size("512M"), std::int64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("8G"), std::int64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("8GiB"), std::int64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("2T"), std::int64_t(2) << 40);
  EXPECT_EQ(parse_byte_size("100B"), 100);
  for (const char* bad : {"", "G", "1.5G", " 8G", "8 G", "8g", "8X", "-1", "99999999999999999999", "9000000000000T"})
    EXPECT_FALSE(parse_byte_size(bad)) << bad;
  EXPECT_THROW(parse({"run", "x.json", "--max-host-memory", "lots"}), UsageError);
}

// RLIMIT_FSIZE makes writes fail past a size, as a full disk would (root ignores permissions).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

TEST(Reports, AFailedWriteKeepsTheOldFileAndTheTable) {
  TempDir dir;
  const std::string path = dir.file("cases.json", small_case_json("one").dump());
  const std::string report = dir.file("r.json", "old report");
  {
    FileSizeLimit limit(64);
    EXPECT_THROW(write_file_atomically(report, std::string(4096, 'x')), std::runtime_error);
    const CommandOutput out = run_cli({"run", path, "--backend", "cpu", "--json", report});
    EXPECT_EQ(out.exit_code, kExitUnmet);
    EXPECT_NE(out.text.find("passed"), std::string::npos);  // the table is there
    EXPECT_NE(out.notes.find("report not written: " + report + ": cannot write: File too large"), std::string::npos)
        << out.notes;
  }
  EXPECT_EQ(read_file(report), "old report");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 2);  // no temporary left behind
  EXPECT_EQ(run_cli({"run", path, "--backend", "cpu", "--json", report}).exit_code, kExitOk);
  EXPECT_EQ(json::parse(read_file(report))["summary"]["total"], 1);
}

TEST(Reports, AnUnwritableReportPathIsRefusedBeforeRunning) {
  TempDir dir;
  const std::string path = dir.file("cases.json", small_case_json("one").dump());
  try {
    run_cli({"run", path, "--backend", "cpu", "--junit", (dir.path() / "missing" / "r.xml").string()});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "missing" / "r.xml").string() + ": cannot write there"),
              std::string::npos)
        << e.what();
  }
}

TEST(Repro, ANonEmptyDirectoryIsRefusedUnlessForced) {
  TempDir dir;
  const std::string path = dir.file("cases.json", small_case_json("one").dump());
  const fs::path bundle = dir.path() / "bundle";
  ASSERT_EQ(run_cli({"repro", path, "--out", bundle.string(), "--backend", "cpu"}).exit_code, kExitOk);
  try {
    run_cli({"repro", path, "--out", bundle.string(), "--backend", "cpu"});
    ADD_FAILURE() << "a second repro into the same directory succeeded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(bundle.string() + ": directory is not empty"), std::string::npos) << e.what();
  }
  // --force empties it first: a stale file of another bundle does not survive.
  std::ofstream(bundle / "outputs.safetensors") << "stale";
  json rejected = small_case_json("one");
  rejected["H"] = 512;
  rejected["tensors"] = {{"prefix", {{"row_stride", 519}}}};
  rejected["kernel"] = "native";
  rejected["expect"] = {{"verdict", "reject"}};
  const std::string reject_path = dir.file("reject.json", rejected.dump());
  EXPECT_EQ(run_cli({"repro", reject_path, "--out", bundle.string(), "--backend", "cpu", "--force"}).exit_code,
            kExitOk);
  EXPECT_FALSE(fs::exists(bundle / "outputs.safetensors"));  // the kernel never ran
  EXPECT_TRUE(fs::exists(bundle / "inputs.safetensors"));
}

TEST(Repro, ALockedDirectoryIsRefused) {
  TempDir dir;
  const std::string path = dir.file("cases.json", small_case_json("one").dump());
  const fs::path bundle = dir.path() / "bundle";
  fs::create_directory(bundle);
  const DirectoryLock held(bundle);
  try {
    run_cli({"repro", path, "--out", bundle.string(), "--backend", "cpu"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), bundle.string() + ": another attnres-check is writing a bundle there");
  }
}

}  // namespace
}  // namespace attnres
