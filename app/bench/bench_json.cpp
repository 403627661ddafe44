#include <nlohmann/json.hpp>

#include "app/bench/bench_printers.h"

namespace attnres {

using nlohmann::json;

namespace {

// A measurement's time as microseconds and bytes per second (and the fraction of the copy's).
json timing(const Measurement& m, double bytes, double copy_bandwidth, bool with_fraction) {
  const double bw = bytes / (*m.median_ms * 1e-3);
  json j = {{"median_us", *m.median_ms * 1e3}, {"bytes_per_s", bw}, {"check", m.check}};
  if (with_fraction) j["fraction_of_copy"] = bw / copy_bandwidth;
  return j;
}

json point_json(const BenchPoint& p, const BenchResults& results) {
  json point = {{"tokens", p.tokens},
                {"num_blocks", p.num_blocks},
                {"hidden", p.hidden},
                {"bytes", p.bytes},
                {"copy_bandwidth", results.copy_bandwidth},
                {"same_bytes_copy_us", p.same_bytes_copy_ms * 1e3},
                {"cublas_reference_ms", p.cublas_reference_ms}};
  point["portable"] = timing(p.portable, p.bytes, results.copy_bandwidth, false);
  if (p.native.measured) {
    point["native"] = timing(*p.native.measured, p.bytes, results.copy_bandwidth, true);
    point["native"]["plan"] = p.native_plan;
  } else {
    point["native"] = {{"not_run", p.native.not_run}};
  }
  if (p.native_pdl) point["native_pdl"] = timing(*p.native_pdl, p.bytes, results.copy_bandwidth, false);
  if (!p.native_plans.empty()) {
    json plans = json::object();
    const auto plan_timing = [](const Measurement& m) {
      return json{{"median_us", *m.median_ms * 1e3}, {"check", m.check}};
    };
    for (const PlanMeasurement& timed : p.native_plans) {
      json& plan = plans[timed.plan] = plan_timing(timed.plain);
      if (timed.with_pdl) plan["pdl"] = plan_timing(*timed.with_pdl);
    }
    point["native_plans"] = plans;
  }
  if (p.kernel) {
    json kernel = {{"name", results.kernel}};
    if (!p.kernel->measured) {
      kernel["not_run"] = p.kernel->not_run;
    } else if (!p.kernel->measured->median_ms) {
      kernel["check"] = p.kernel->measured->check;
    } else {
      kernel.update(timing(*p.kernel->measured, p.bytes, results.copy_bandwidth, true));
      kernel["timed"] = p.kernel->measured->timed;
    }
    point["kernel"] = kernel;
  }
  return point;
}

}  // namespace

std::string bench_json(const BenchResults& results) {
  json points = json::array();
  for (const BenchPoint& p : results.points) points.push_back(point_json(p, results));
  return json{{"schema", "attnres-check/bench"},          {"schema_version", 1},        {"device", results.device},
              {"copy_bandwidth", results.copy_bandwidth}, {"repeats", results.repeats}, {"points", points}}
             .dump(2) +
         "\n";
}

}  // namespace attnres
