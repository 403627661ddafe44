// What `bench` measured, apart from how it is printed (bench_printers.h): per point, each kernel's
// check against the float64 reference and its median time.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnres {

// What to time: every (blocks, tokens) pair at one hidden size, delta and output norm on.
struct BenchRequest {
  std::vector<std::int64_t> tokens{1, 64, 320, 4096, 16384};
  std::vector<int> blocks{1, 4, 8};
  int hidden = 7168;
  int repeats = 50;
  bool pdl = false;           // also time the native kernel (and with native_plans, each plan) with PDL
  bool native_plans = false;  // also time every native plan, not only the one chosen
};

// One kernel at one point: its check (made before it is timed) and its median time.
struct Measurement {
  std::string check;                // "ok (max-abs 0.0156)", "INCORRECT: ...", or "REFUSED: ..."
  std::optional<double> median_ms;  // nothing where it refused
  std::string timed = "graph";      // graph replays, or "events" around each launch (host overhead included)
  bool ok() const { return check.rfind("ok", 0) == 0; }
};

// One native plan at a point: launched plainly, and with programmatic dependent launch under --pdl.
struct PlanMeasurement {
  std::string plan;
  Measurement plain;
  std::optional<Measurement> with_pdl;
};

// A kernel that runs at a point, or why it does not.
struct KernelAtPoint {
  std::optional<Measurement> measured;
  std::string not_run;  // the reason, where it did not run
};

struct BenchPoint {
  std::int64_t tokens = 0;
  int num_blocks = 0;
  int hidden = 0;
  double bytes = 0;  // read and written by one call
  double same_bytes_copy_ms = 0;
  double cublas_reference_ms = 0;
  Measurement portable;
  KernelAtPoint native;
  std::string native_plan;                                        // where native runs: the plan it picks
  std::optional<Measurement> native_pdl;                          // with --pdl, where native runs
  std::vector<PlanMeasurement> native_plans;                      // with --native-plans, in all_plans order
  std::optional<KernelAtPoint> kernel;                            // with --kernel
};

struct BenchResults {
  std::string device, arch;
  int hidden = 0;
  int repeats = 0;
  bool pdl = false;
  double copy_bandwidth = 0;       // bytes read plus written per second by a 2 GiB device-to-device copy
  std::string kernel;              // --kernel, if any
  std::vector<std::string> plans;  // with --native-plans: every plan at this hidden size
  std::vector<BenchPoint> points;
};

}  // namespace attnres
