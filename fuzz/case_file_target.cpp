// libFuzzer target: a case file's bytes, as a stranger's bug report would carry them.
// Every case that loads must round-trip through the writer, and a small one is generated,
// run through the CPU stand-ins and checked, so a case that parses but cannot be handled
// safely is found too.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "app/casefile/case_spec.h"
#include "app/casefile/json_io.h"
#include "app/engine/checks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/registry/layout_guard.h"
#include "reference/cpu_reference.h"

namespace {

// Cases larger than this are only parsed: the tool budgets memory before allocating.
constexpr std::int64_t kMaxGeneratedBytes = std::int64_t(64) << 10;

void exercise(const attnres::CaseSpec& spec) {
  using namespace attnres;
  const CaseSpec again = parse_case(parse_json_strict(dump_json(case_to_json(spec))), spec.file, spec.pointer);
  if (case_to_json(again) != case_to_json(spec)) std::abort();  // the writer lost or changed something

  const std::optional<std::int64_t> bytes = case_storage_bytes(spec.shape, spec.strides);
  if (!bytes || *bytes > kMaxGeneratedBytes) return;
  const CaseTensors inputs = make_case_tensors(spec);
  CaseTensors after = inputs;
  cpu_portable_kernel(after.args());
  // The stride-honouring kernel writes exactly prefix, the written block and the output.
  const ExactnessReport report = check_after_run(after, expected_after_run(inputs));
  if (!report.violations.empty() || report.prefix_mismatches || report.blocks_mismatches) std::abort();
  CaseTensors scratch = inputs;
  const std::vector<double> reference = cpu_reference(scratch.args());
  if (reference.size() != std::size_t(spec.shape.tokens * spec.shape.hidden)) std::abort();
  CaseTensors native = inputs;
  try {
    cpu_native_kernel(native.args(), true);
  } catch (const LayoutError&) {
    if (!dense_rows_violation(spec.shape, spec.strides)) std::abort();  // refused a dense layout
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  attnres::LoadedCases loaded;
  attnres::parse_case_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json", loaded);
  for (const attnres::CaseSpec& spec : loaded.cases) exercise(spec);
  return 0;
}
