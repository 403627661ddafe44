// attnres-check entry point: the only place that writes to the terminal.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/casefile/case_spec.h"
#include "app/casefile/json_io.h"
#include "app/cli/cli.h"
#include "app/cli/commands.h"
#include "app/engine/interrupt.h"
#include "app/workers/sanitizer.h"

namespace {

// Length-counted: a message holds whatever bytes it holds, and a NUL must not end the output.
// Every byte passes the one sanitiser: no escape sequence of someone else's reaches the terminal.
void write_out(const std::string& text) {
  const std::string safe = attnres::terminal_text(text);
  std::fwrite(safe.data(), 1, safe.size(), stdout);
}

void print_notes(const std::string& notes) {
  std::size_t start = 0;
  while (start < notes.size()) {
    const std::size_t end = notes.find('\n', start);
    std::fprintf(stderr, "attnres-check: %s\n", attnres::printable(notes.substr(start, end - start)).c_str());
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnres;
  try {
    if (argc > 1 && std::string(argv[1]) == kSanitizedWorkerCommand)
      serve_sanitized_worker(std::vector<std::string>(argv + 2, argv + argc));
    Invocation invocation = parse(std::vector<std::string>(argv + 1, argv + argc));
    if (!invocation.help.empty()) {
      write_out(invocation.help);
      return kExitOk;
    }
    // run finishes its reports on SIGINT or SIGTERM; the other commands end at once, as usual.
    if (invocation.command == Command::run) install_interrupt_handlers();
    invocation.color = isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
    const bool live_progress = isatty(STDERR_FILENO);
    Progress progress;
    if (live_progress)
      progress = [](int index, int total, const std::string& name) {
        std::fprintf(stderr, "\r\033[K[%d/%d] %s", index + 1, total, printable(name).c_str());
        std::fflush(stderr);
      };
    // Each case's rows as soon as it is judged, the progress line cleared first.
    const TextSink stream = [live_progress](const std::string& text) {
      if (live_progress) std::fputs("\r\033[K", stderr);
      write_out(text);
      std::fflush(stdout);
    };
    const CommandOutput output = execute(invocation, progress, stream);
    if (live_progress) std::fputs("\r\033[K", stderr);
    print_notes(output.notes);
    write_out(output.text);
    return output.exit_code;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "attnres-check: %s\n", printable_lines(e.what()).c_str());
    return kExitBadInput;
  } catch (const CaseParseError& e) {
    std::fprintf(stderr, "attnres-check: %s\n", printable_lines(e.what()).c_str());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnres-check: %s\n", printable_lines(e.what()).c_str());
    return kExitUnmet;
  }
}
