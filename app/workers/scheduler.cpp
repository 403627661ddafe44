// run_in_workers (worker.h): cases handed to whichever worker process is free, their results
// passed on in case order, and workers that die, hang or lose their CUDA context replaced.
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "app/engine/command_output.h"
#include "app/engine/interrupt.h"
#include "app/report/result_json.h"
#include "app/workers/worker.h"
#include "app/workers/worker_process.h"

namespace attnres {

using nlohmann::json;

namespace {

// One worker process and the case it runs.
struct Slot {
  int device = -1;
  std::unique_ptr<WorkerProcess> worker;
  bool greeted = false, ever_greeted = false;
  std::optional<std::size_t> running;
  std::chrono::steady_clock::time_point start;
  std::string backend = "none", device_name = "none (no worker started)";
};

}  // namespace

std::string run_in_workers(const std::vector<CaseSpec>& cases, const BackendMaker& make_backend, const WorkerPlan& plan,
                           const RunOptions& options, const std::function<void(int, int, const std::string&)>& progress,
                           const std::function<void(const CaseResult&)>& judged) {
  std::vector<Slot> slots;
  for (const int device : plan.devices.empty() ? std::vector<int>{-1} : plan.devices)
    slots.emplace_back().device = device;
  std::vector<std::optional<CaseResult>> done(cases.size());
  std::size_t next = 0, emitted = 0;
  std::string notes;
  bool started_once = false;
  int expand_to = 0;  // with plan.all_devices: the device count the first worker reported

  auto finish = [&](Slot& slot, CaseResult result) {
    done[*slot.running] = std::move(result);
    slot.running.reset();
    while (emitted < done.size() && done[emitted]) judged(*done[emitted++]);
  };
  auto lost = [&](Slot& slot, const std::string& what) {
    CaseResult r = lost_case(cases[*slot.running], slot.backend, slot.device_name, options.kernel, what, slot.start);
    slot.worker.reset();
    slot.greeted = false;
    finish(slot, std::move(r));
  };
  auto ask = [&](Slot& slot) {
    slot.start = std::chrono::steady_clock::now();  // the worker's start-up had a deadline of its own
    if (!slot.worker->request({{"index", *slot.running}}))
      lost(slot, fmt::format("the worker process running this case {}; a new worker runs the remaining cases",
                             slot.worker->ending()));
  };
  auto handle = [&](Slot& slot, const json& message) {
    if (slot.greeted) {
      if (message.contains("error")) {
        lost(slot, "the worker process could not run this case: " + message.at("error").get<std::string>());
        return;
      }
      finish(slot, result_from_json(message.at("result")));
      // A lost CUDA context would fail every later case there: a fresh worker takes over.
      if (message.at("restart").get<bool>()) slot.worker.reset();
      return;
    }
    if (message.contains("fatal")) {
      // A worker that could never start (a bad --kernel, a device that is not there) is the
      // run's error; a replacement that cannot start costs its case.
      const std::string text = message.at("fatal").get<std::string>();
      const bool usage = message.at("usage").get<bool>();
      if (!slot.ever_greeted && usage) throw UsageError(text);
      if (!started_once) throw std::runtime_error(text);
      lost(slot, "a new worker process could not start: " + text);
      return;
    }
    if (!started_once) {
      notes = message.at("notes").get<std::string>();
      if (plan.all_devices) expand_to = message.at("device_count").get<int>();
    }
    started_once = true;
    slot.greeted = slot.ever_greeted = true;
    slot.backend = message.at("backend").get<std::string>();
    slot.device_name = message.at("device").get<std::string>();
    if (plan.started) plan.started(slot.worker->pid(), slot.device_name);
    ask(slot);
  };

  while (emitted < cases.size()) {
    if (const int signal = interrupt_signal()) {
      // The cases in flight are abandoned; run_in_workers' caller marks the ones never started.
      for (Slot& slot : slots) {
        if (!slot.running) continue;
        if (slot.worker) slot.worker->kill();
        slot.worker.reset();
        finish(slot, lost_case(cases[*slot.running], slot.backend, slot.device_name, options.kernel,
                               interrupted_detail(signal), slot.start, Disposition::not_run));
      }
      break;
    }
    // "all": the first worker has said how many devices there are; one more worker per device.
    for (int device = int(slots.size()); device < expand_to; ++device) slots.emplace_back().device = device;
    expand_to = 0;
    for (Slot& slot : slots) {
      if (slot.running || next == cases.size()) continue;
      slot.running = next++;
      slot.start = std::chrono::steady_clock::now();
      if (progress) progress(int(*slot.running), int(cases.size()), cases[*slot.running].name);
      if (!slot.worker) {
        const int device = slot.device;
        const WorkerBackendMaker make = [&make_backend, device](std::string& n) { return make_backend(device, n); };
        slot.worker = std::make_unique<WorkerProcess>(cases, plan.replay, make, options, BackendOptions{});
        slot.greeted = false;
      } else {
        ask(slot);
      }
    }
    std::vector<pollfd> waiting;
    std::vector<Slot*> owners;
    for (Slot& slot : slots)
      if (slot.running && slot.worker) {
        waiting.push_back({slot.worker->socket(), POLLIN, 0});
        owners.push_back(&slot);
      }
    if (waiting.empty()) continue;
    // Wake for the earliest deadline of a running case (a worker starting up counts as its case).
    int wait_ms = -1;
    for (const Slot* slot : owners) {
      const int ms = Deadline{plan.case_timeout_seconds, slot->start}.poll_milliseconds();
      wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
    }
    if (::poll(waiting.data(), waiting.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("waiting for the worker processes: {}", std::strerror(errno)));
    }
    for (std::size_t i = 0; i < waiting.size(); ++i) {
      Slot& slot = *owners[i];
      if (!waiting[i].revents) {
        if (Deadline{plan.case_timeout_seconds, slot.start}.passed()) {
          const bool started = slot.greeted;
          slot.worker->kill();
          // A first worker that never starts would cost every case the same wait: the run's error.
          if (!started && !started_once)
            throw std::runtime_error(
                fmt::format("the worker process gave no answer within {} s of starting (--timeout) "
                            "and was killed",
                            plan.case_timeout_seconds));
          lost(slot, fmt::format("no answer within {} s (--timeout): the worker process {} was killed; a new worker "
                                 "runs the remaining cases",
                                 plan.case_timeout_seconds, started ? "running this case" : "starting up"));
        }
        continue;
      }
      if (!slot.worker->read_more()) {
        lost(slot, slot.greeted
                       ? fmt::format("the worker process running this case {}; a new worker runs the remaining cases",
                                     slot.worker->ending())
                       : fmt::format("the worker process {} before it could run a case", slot.worker->ending()));
        continue;
      }
      while (slot.worker && slot.running) {
        const std::optional<json> message = slot.worker->buffered();
        if (!message) break;
        handle(slot, *message);
      }
    }
  }
  return notes;
}

}  // namespace attnres
