#include "app/engine/interrupt.h"

#include <signal.h>

#include <csignal>

#include <fmt/format.h>

namespace attnres {

namespace {

volatile std::sig_atomic_t received = 0;

void on_interrupt(int signal) {
  if (received) {
    // The second: the default action, at once.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  received = signal;
}

void set_handler(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a wait in poll returns EINTR and sees the signal
  for (const int signal : {SIGINT, SIGTERM}) ::sigaction(signal, &action, nullptr);
}

}  // namespace

void install_interrupt_handlers() { set_handler(on_interrupt); }

int interrupt_signal() { return received; }

void ignore_interrupts() { set_handler(SIG_IGN); }

std::string signal_name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : fmt::format("signal {}", signal);
}

std::string interrupted_detail(int signal) {
  return fmt::format("not-run (interrupted by {}): the run stopped before this case was judged", signal_name(signal));
}

}  // namespace attnres
