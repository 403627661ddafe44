// What a command produces (only main prints it) and the exit codes it ends with.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

namespace attnres {

// Bad input from the user (flags, paths, case selections): exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit codes: every case met its expectation / some did not / bad input or usage / nothing judged.
constexpr int kExitOk = 0;
constexpr int kExitUnmet = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitNoCases = 5;  // nothing selected or judged (pytest's code for no tests collected)
constexpr const char* kJudgedNothing =
    "every case is not-run: nothing was judged, and --allow-not-run does not pass that";

struct CommandOutput {
  std::string text;   // stdout
  std::string notes;  // stderr (hints, warnings)
  int exit_code = kExitOk;
};

// Called before each case with (index, total, name), for a progress line.
using Progress = std::function<void(int, int, const std::string&)>;
// Takes stdout text as soon as it is ready (each case's rows as it is judged); without one, all
// of it is in CommandOutput::text.
using TextSink = std::function<void(const std::string&)>;

}  // namespace attnres
