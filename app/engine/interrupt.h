// SIGINT and SIGTERM during a run. The first one stops the run from starting cases: the case in
// flight in this process finishes (one in a worker process is abandoned), the rest are not-run
// (interrupted), the reports are written, and the run exits 128 + the signal. A second signal
// ends the process at once.
#pragma once
#include <string>

namespace attnres {

// Called by main before `run` does any work.
void install_interrupt_handlers();

// 0 until the first SIGINT or SIGTERM, then that signal's number.
int interrupt_signal();

// A worker process ignores both: its parent decides whether the case in flight is abandoned.
void ignore_interrupts();

// "SIGINT", "SIGTERM".
std::string signal_name(int signal);

// "not-run (interrupted by SIGINT)...": the detail of a case the signal kept from being judged.
std::string interrupted_detail(int signal);

}  // namespace attnres
