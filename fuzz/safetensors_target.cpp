// libFuzzer target: a safetensors file's bytes, read and replayed as a case's inputs the way
// `run --inputs` does: header, metadata views, extents, checksums, then the copy.
#include <cstdint>
#include <sstream>
#include <string>

#include "app/casefile/host_tensors.h"
#include "app/casefile/safetensors.h"

namespace {

// Layouts larger than this are only validated: the tool budgets memory before copying.
constexpr std::int64_t kMaxCopiedBytes = std::int64_t(16) << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnres;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    SafetensorsFile file = parse_safetensors(in, size, "fuzz.safetensors");
    // The scalars a case file would give: vary them with the input so every check is reached.
    CaseSpec spec = default_case("fuzz", 1, 8, 1, 0);
    spec.shape.num_blocks = size > 0 ? data[0] % 3 : 0;
    spec.shape.block_write_idx = size > 1 ? int(data[1] % 4) - 1 : -1;
    const ReplayInputs replay(std::move(file), "fuzz.safetensors", spec, true);
    const std::optional<std::int64_t> bytes = case_storage_bytes(spec.shape, spec.strides);
    if (bytes && *bytes <= kMaxCopiedBytes) {
      const CaseTensors tensors = replay.tensors();
      for (const HostTensor* t : tensors.all()) checksum(*t);
    }
  } catch (const SafetensorsError&) {}
  return 0;
}
