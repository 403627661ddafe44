// One case's result as JSON, both ways: the report's "cases" entries, and what a worker
// process sends back to the process that judges the run (app/workers/worker.h).
#pragma once
#include <nlohmann/json.hpp>

#include "app/engine/runner.h"

namespace attnres {

// A float64 as JSON: non-finite values as the strings "NaN", "Infinity", "-Infinity" (JSON has
// no literal for them, and null would lose which one it was).
nlohmann::json json_number(double value);
// The inverse of json_number. Throws std::invalid_argument on anything else.
double number_from_json(const nlohmann::json& value);

nlohmann::json result_json(const CaseResult& result);
// The inverse of result_json. Throws nlohmann::json::exception or std::invalid_argument on a
// document result_json did not write.
CaseResult result_from_json(const nlohmann::json& value);

// A document's schema_version: an integer from 1 to `newest` (std::invalid_argument otherwise,
// saying when it is newer than this tool).
int schema_version_of(const nlohmann::json& value, int newest);

}  // namespace attnres
