// bench's results as a markdown table (also its terminal output), JSON and CSV: one file each.
#pragma once
#include <string>

#include "app/bench/bench_results.h"

namespace attnres {

std::string bench_markdown(const BenchResults& results);
std::string bench_json(const BenchResults& results);
std::string bench_csv(const BenchResults& results);

}  // namespace attnres
