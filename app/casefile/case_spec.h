// Case files: the schema (docs/cases.md), loading with errors that name file and JSON path,
// and the writer used by repro bundles and the shrinker.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/casefile/case_property.h"
#include "kernels/common/philox.h"
#include "kernels/common/problem.h"
#include "kernels/registry/device.h"

namespace attnres {

constexpr int kCaseSchemaVersion = 1;

// What one run reads at most (docs/cases.md): bigger inputs are errors, not slow runs.
constexpr std::uintmax_t kMaxCaseFileBytes = 16u << 20;
constexpr std::size_t kMaxCasesPerFile = 10000;
constexpr std::size_t kMaxErrorsPerFile = 100;  // then one line counts the rest
constexpr std::size_t kMaxCaseFiles = 10000;    // below the directories given

// The generated inputs, in the order their checksums are reported.
enum class InputTensor { prefix = 0, delta, blocks, norm_weight, qk_weight, output_norm_weight };
constexpr int kInputTensorCount = 6;
const char* to_string(InputTensor tensor);

struct DistributionSpec {
  DistributionKind kind = DistributionKind::normal;
  double mean = 0.0;
  double std = 1.0;
  bool divide_by_sqrt_hidden = false;
  double low = -1.0;
  double high = 1.0;
  double value = 0.0;
  // blocks only: block b's values scaled by block_scales[b] (blocks past the list: 1), so that
  // sources differ in RMS as residual streams do with depth.
  std::vector<double> block_scales;
};

ResolvedDistribution resolve(const DistributionSpec& spec, const AttnResShape& shape);

// What a kernel must do with a case: compute it correctly, refuse it, or either (a kernel that
// declares it may refuse). Only pass and reject are written in case files.
enum class Expectation { pass, reject, pass_or_reject };

struct CaseSpec {
  std::string file;     // where it was read from ("" when built in code)
  std::string pointer;  // JSON pointer of the case inside the file ("" or "/3")
  std::string name;
  std::string description;
  AttnResShape shape;
  double eps = 1e-6;
  double output_norm_eps = 1e-6;
  std::uint64_t seed = 0;
  // The one layout (elements): row strides, the blocks' two outer strides, storage offsets.
  AttnResStrides strides;
  std::array<DistributionSpec, kInputTensorCount> distributions;
  double atol = 8e-2;
  double rtol = 3e-2;
  // The case file's own expectation, where it has one (a bug report's exact rejection): it wins
  // over what the kernel declares (kernels/registry/preconditions.h).
  bool expectation_written = false;
  Expectation expect = Expectation::pass;
  std::string expected_message;  // with a refusal expected or allowed; empty: any rejection message
  KernelChoice kernel = KernelChoice::automatic;
  bool layout_guard = true;
  // What the case asks of the kernel besides one correct call, whatever the command line asks.
  std::vector<CaseProperty> checks;

  // "cases/x.json" or "cases/x.json#/3": where to find it.
  std::string location() const;
};

// A case with every default filled in (the defaults of the schema), for code-built cases.
CaseSpec default_case(std::string name, std::int64_t tokens, int hidden, int max_blocks, int num_blocks);

// A bad case file or case: "file: /json/pointer: what is wrong".
struct CaseLoadError {
  std::string file;
  std::string pointer;
  std::string message;
  std::string to_string() const;
};

struct LoadedCases {
  std::vector<CaseSpec> cases;
  std::vector<CaseLoadError> errors;
  std::vector<std::string> opted_out;  // a line for each directory below those given not read: opt-in
};

// A directory holding this file is read only when it is named itself, not from a directory
// above it (cases/scale: tens of GB of device memory); the file's first line says why.
inline constexpr const char* kOptInMarker = "OPT-IN";
inline constexpr std::size_t kMaxOptInReason = 400;

// Files and directories (read recursively, *.json in name order; a directory with kOptInMarker
// only where named). A bad case is an error of its own; the other cases of the same file are
// still returned.
LoadedCases load_cases(const std::vector<std::string>& paths);

// The cases of one file's text: every failure (not JSON, a bad case) is an error naming `file`.
void parse_case_text(std::string_view text, const std::string& file, LoadedCases& out);

// One case from parsed JSON; throws CaseParseError.
CaseSpec parse_case(const nlohmann::json& value, const std::string& file, const std::string& pointer);

class CaseParseError : public std::runtime_error {
 public:
  CaseParseError(CaseLoadError error) : std::runtime_error(error.to_string()), error_(std::move(error)) {}
  const CaseLoadError& error() const { return error_; }

 private:
  CaseLoadError error_;
};

// The case as schema JSON: parse_case(case_to_json(c)) gives c back.
nlohmann::json case_to_json(const CaseSpec& spec);

}  // namespace attnres
