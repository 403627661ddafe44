#include "app/casefile/case_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "app/casefile/case_layout.h"
#include "app/casefile/json_io.h"
#include "app/casefile/object_reader.h"
#include "kernels/common/checked_size.h"

namespace attnres {

using nlohmann::json;

namespace {

// Largest storage of any one tensor, in elements: far beyond any GPU, small enough that
// byte counts and index arithmetic never overflow int64.
constexpr std::int64_t kMaxTensorElements = std::int64_t(1) << 40;

DistributionSpec parse_distribution(const json& value, const std::string& pointer, DistributionSpec fallback,
                                    bool takes_block_scales) {
  ObjectReader dist(value, pointer);
  const std::string kind = dist.choice("kind", {"normal", "uniform", "constant"}, "normal");
  DistributionSpec spec = fallback;
  if (kind == "normal") {
    spec.kind = DistributionKind::normal;
    spec.mean = dist.number("mean", 0.0);
    spec.std = dist.number("std", 1.0);
    spec.divide_by_sqrt_hidden = dist.boolean("divide_by_sqrt_hidden", false);
    if (!(spec.std >= 0.0) || !std::isfinite(spec.std)) dist.fail("std", fmt::format("must be >= 0, got {}", spec.std));
  } else if (kind == "uniform") {
    spec.kind = DistributionKind::uniform;
    spec.low = dist.number("low", -1.0);
    spec.high = dist.number("high", 1.0);
    if (!(spec.high >= spec.low)) dist.fail("high", fmt::format("must be >= low ({}), got {}", spec.low, spec.high));
  } else {
    spec.kind = DistributionKind::constant;
    spec.value = dist.number("value", 0.0);
  }
  spec.block_scales.clear();
  if (const json* scales = dist.find("block_scales")) {
    if (!takes_block_scales) dist.fail("block_scales", "only the blocks' distribution has block_scales");
    if (!scales->is_array() || scales->empty() || scales->size() > std::size_t(kMaxScaledBlocks))
      dist.fail("block_scales", fmt::format("must be a list of 1 to {} numbers, one per block", kMaxScaledBlocks));
    for (std::size_t b = 0; b < scales->size(); ++b) {
      const json& scale = (*scales)[b];
      if (!scale.is_number() || !(scale.get<double>() >= 0.0) || !std::isfinite(scale.get<double>()))
        dist.fail("block_scales",
                  fmt::format("entry {} must be a finite number >= 0, got {}", b,
                              scale.is_number() ? fmt::format("{}", scale.get<double>()) : json_type_name(scale)));
      spec.block_scales.push_back(scale.get<double>());
    }
  }
  const double largest_scale =
      spec.block_scales.empty() ? 1.0
                                : std::max(1.0, *std::max_element(spec.block_scales.begin(), spec.block_scales.end()));
  // Every generated value must be a finite bf16: a distribution that rounds to Inf makes a case
  // whose reference is not finite (the largest finite bf16 is 3.3895e38).
  constexpr double kLargestBf16 = 3.3895313892515355e38;
  const auto require_bf16 = [&](const char* key, double unscaled_bound) {
    const double bound = unscaled_bound * largest_scale;
    if (!(bound <= kLargestBf16))
      dist.fail(key, fmt::format("values up to {:g} do not fit bf16 (largest finite value {:g})", bound, kLargestBf16));
  };
  if (spec.kind == DistributionKind::normal) {
    const double spread = spec.std * 3.4641016151377544;  // the generator's normals are bounded at 2*sqrt(3) std
    require_bf16(spread > std::fabs(spec.mean) ? "std" : "mean", std::fabs(spec.mean) + spread);
  } else if (spec.kind == DistributionKind::uniform) {
    require_bf16(std::fabs(spec.low) > std::fabs(spec.high) ? "low" : "high",
                 std::max(std::fabs(spec.low), std::fabs(spec.high)));
  } else {
    require_bf16("value", std::fabs(spec.value));
  }
  dist.reject_unknown_keys();
  return spec;
}

std::array<DistributionSpec, kInputTensorCount> default_distributions() {
  std::array<DistributionSpec, kInputTensorCount> d{};
  d[int(InputTensor::norm_weight)].mean = 1.0;
  d[int(InputTensor::norm_weight)].std = 0.1;
  d[int(InputTensor::output_norm_weight)].mean = 1.0;
  d[int(InputTensor::output_norm_weight)].std = 0.1;
  d[int(InputTensor::qk_weight)].divide_by_sqrt_hidden = true;
  return d;
}

// The largest magnitude a distribution draws at hidden size H (the generator's normals are
// bounded at 2*sqrt(3) std), block scales included.
double magnitude_bound(const DistributionSpec& d, int hidden) {
  double bound = 0;
  switch (d.kind) {
    case DistributionKind::normal:
      bound = std::fabs(d.mean) +
              3.4641016151377544 * (d.divide_by_sqrt_hidden ? d.std / std::sqrt(double(hidden)) : d.std);
      break;
    case DistributionKind::uniform: bound = std::max(std::fabs(d.low), std::fabs(d.high)); break;
    case DistributionKind::constant: bound = std::fabs(d.value); break;
  }
  for (const double scale : d.block_scales) bound = std::max(bound, bound * scale);
  return bound;
}

// Kernels accumulate in float32 (as vLLM's and FlashInfer's do): a case whose sums can leave
// float32's range would make a correct kernel look wrong. Every term that a kernel adds up must
// fit with a factor of 2 to spare: the sum of squares and the weighted dot of each source (p =
// prefix + delta, and the blocks), and the normalised output times its weight in bf16.
void require_float32_range(const CaseSpec& spec, const std::string& file, const std::string& tensors_pointer) {
  constexpr double kFloat32Max = 3.4028234663852886e38, kBf16Max = 3.3895313892515355e38;
  const int hidden = spec.shape.hidden;
  if (hidden <= 0) return;
  const auto bound = [&](InputTensor t) { return magnitude_bound(spec.distributions[int(t)], hidden); };
  const double p = bound(InputTensor::prefix) + (spec.shape.has_delta ? bound(InputTensor::delta) : 0.0);
  const double blocks = bound(InputTensor::blocks);
  const double source = std::max(p, blocks);
  const bool delta_largest = spec.shape.has_delta && bound(InputTensor::delta) > bound(InputTensor::prefix);
  const char* source_name = blocks > p ? "blocks" : delta_largest ? "delta" : "prefix";
  const double weight = bound(InputTensor::norm_weight) * bound(InputTensor::qk_weight);
  const double limit = kFloat32Max / 2;
  const auto fail = [&](const char* tensor, const std::string& why) {
    throw CaseParseError(CaseLoadError{file, fmt::format("{}/{}/dist", tensors_pointer, tensor),
                                       why + "; cases stay inside float32's range (docs/cases.md, Value ranges)"});
  };
  if (double(hidden) * source * source > limit)
    fail(source_name,
         fmt::format("values up to {:g} make a sum of squares over H={} beyond float32's range (needs |v| <= {:.3g})",
                     source, hidden, std::sqrt(limit / hidden)));
  if (double(hidden) * source * weight > limit)
    fail(weight > 1 ? "qk_weight" : source_name,
         fmt::format(
             "sources up to {:g} times norm_weight*qk_weight up to {:g} make a dot over H={} beyond float32's range",
             source, weight, hidden));
  if (spec.shape.has_output_norm && bound(InputTensor::output_norm_weight) * std::sqrt(double(hidden)) > kBf16Max)
    fail("output_norm_weight",
         fmt::format("values up to {:g} times a normalised output of up to sqrt(H)={:.3g} overflow bf16",
                     bound(InputTensor::output_norm_weight), std::sqrt(double(hidden))));
}

}  // namespace

// The inputs are the operands before the output, in the same order (case_to_json and the
// distributions rely on it).
static_assert(int(InputTensor::output_norm_weight) == int(Operand::output_norm_weight) &&
              kInputTensorCount + 1 == kOperandCount);
const char* to_string(InputTensor tensor) { return to_string(Operand(int(tensor))); }

ResolvedDistribution resolve(const DistributionSpec& spec, const AttnResShape& shape) {
  ResolvedDistribution r;
  r.kind = spec.kind;
  switch (spec.kind) {
    case DistributionKind::normal:
      r.a = spec.mean;
      r.b = spec.divide_by_sqrt_hidden ? spec.std / std::sqrt(double(shape.hidden)) : spec.std;
      break;
    case DistributionKind::uniform:
      r.a = spec.low;
      r.b = spec.high - spec.low;
      break;
    case DistributionKind::constant:
      r.a = spec.value;
      r.b = 0.0;
      break;
  }
  if (!spec.block_scales.empty() && shape.max_blocks > 0) {
    r.block_period = shape.max_blocks;
    r.row_length = shape.hidden;
    for (int b = 0; b < shape.max_blocks; ++b)
      r.block_scale[b] = std::size_t(b) < spec.block_scales.size() ? spec.block_scales[std::size_t(b)] : 1.0;
  }
  return r;
}

std::string CaseLoadError::to_string() const {
  if (pointer.empty()) return fmt::format("{}: {}", file, message);
  return fmt::format("{}: {}: {}", file, pointer, message);
}

std::string CaseSpec::location() const {
  if (file.empty()) return "<built-in>";
  return pointer.empty() ? file : file + "#" + pointer;
}

CaseSpec default_case(std::string name, std::int64_t tokens, int hidden, int max_blocks, int num_blocks) {
  CaseSpec spec;
  spec.name = std::move(name);
  spec.shape.tokens = tokens;
  spec.shape.hidden = hidden;
  spec.shape.max_blocks = max_blocks;
  spec.shape.num_blocks = num_blocks;
  spec.shape.has_delta = true;
  spec.shape.has_output_norm = true;
  spec.shape.eps = float(spec.eps);
  spec.shape.output_norm_eps = float(spec.output_norm_eps);
  spec.strides.prefix = spec.strides.delta = spec.strides.output = hidden;
  set_token_major_blocks(spec.strides, max_blocks, hidden);
  spec.distributions = default_distributions();
  return spec;
}

// One tensor's layout: "stride" (the full list, [s0, 1], blocks [s0, s1, 1], weights [1]) or
// the shorthands "row_stride" / "row_padding" (blocks: token-major rows), and "storage_offset".
void parse_tensor_layout(ObjectReader& tensor, Operand operand, int dims, CaseSpec& spec) {
  const std::int64_t hidden = spec.shape.hidden;
  const bool has_list = tensor.has("stride");
  const bool has_row_stride = dims > 1 && tensor.has("row_stride"), has_padding = dims > 1 && tensor.has("row_padding");
  if (int(has_list) + int(has_row_stride) + int(has_padding) > 1)
    tensor.fail(has_list ? "stride" : "row_padding", "give one of stride, row_stride or row_padding");
  std::optional<std::int64_t> row_stride;
  if (has_row_stride) {
    row_stride = tensor.integer("row_stride");
    if (*row_stride < hidden || *row_stride > kMaxTensorElements)
      tensor.fail("row_stride", fmt::format("must be in [hidden_size ({}), 2^40], got {}", hidden, *row_stride));
  }
  if (has_padding) {
    const std::int64_t padding = tensor.integer("row_padding");
    if (padding < 0 || padding > (std::int64_t(1) << 20))
      tensor.fail("row_padding", fmt::format("must be in [0, 2^20], got {}", padding));
    row_stride = hidden + padding;
  }
  AttnResStrides& strides = spec.strides;
  std::vector<std::int64_t> list = tensor.integer_list("stride", std::size_t(dims), kMaxTensorElements, "2^40");
  if (!list.empty() && list.back() != 1)
    tensor.fail_item("stride", list.size() - 1,
                     fmt::format("must be 1, got {}: elements along H are contiguous in every operand this tool makes "
                                 "(its kernels, references and checks take no other hidden stride)",
                                 list.back()));
  if (row_stride)
    list = operand == Operand::blocks ? std::vector<std::int64_t>{spec.shape.max_blocks * *row_stride, *row_stride, 1}
                                      : std::vector<std::int64_t>{*row_stride, 1};
  if (!list.empty()) {
    switch (operand) {
      case Operand::prefix: strides.prefix = list[0]; break;
      case Operand::delta: strides.delta = list[0]; break;
      case Operand::output: strides.output = list[0]; break;
      case Operand::blocks:
        strides.blocks_token = list[0];
        strides.blocks_row = list[1];
        break;
      default: break;  // a weight's only stride is its unit one
    }
  }
  const std::int64_t offset = tensor.integer("storage_offset", 0);
  if (offset < 0 || offset > kMaxTensorElements)
    tensor.fail("storage_offset", fmt::format("must be in [0, 2^40], got {}", offset));
  strides.storage_offset[int(operand)] = offset;
}

CaseSpec parse_case_fields(const json& value, const std::string& file, const std::string& pointer) {
  ObjectReader r(value, pointer);
  const std::int64_t version = r.integer("schema_version");
  if (version != kCaseSchemaVersion)
    r.fail("schema_version",
           fmt::format("unsupported schema_version {}, this tool reads {}", version, kCaseSchemaVersion));

  CaseSpec spec;
  spec.file = file;
  spec.pointer = pointer;
  spec.name = r.string("name");
  if (spec.name.empty() ||
      spec.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    r.fail("name",
           fmt::format("must be non-empty letters, digits, '.', '_' or '-', got {}", quoted_literal(spec.name)));
  spec.description = r.string("description", "");

  const std::int64_t tokens = r.integer("T");
  if (tokens < 0 || tokens > kMaxTokens) r.fail("T", fmt::format("must be in [0, 2^31], got {}", tokens));
  const std::int64_t hidden = r.integer("H");
  if (hidden < 8 || hidden > kMaxHidden || hidden % 8 != 0)
    r.fail("H", fmt::format("must be a multiple of 8 in [8, 65536], got {}", hidden));
  const std::int64_t max_blocks = r.integer("max_blocks");
  if (max_blocks < 0 || max_blocks > 64) r.fail("max_blocks", fmt::format("must be in [0, 64], got {}", max_blocks));
  const std::int64_t num_blocks = r.integer("num_blocks");
  if (num_blocks < 0 || num_blocks > max_blocks)
    r.fail("num_blocks", fmt::format("must be in [0, max_blocks ({})], got {}", max_blocks, num_blocks));
  const std::int64_t block_write_idx = r.integer("block_write_idx", -1);
  if (block_write_idx < -1 || block_write_idx >= max_blocks)
    r.fail("block_write_idx",
           fmt::format("must be -1 (no write) or in [0, max_blocks ({})), got {}", max_blocks, block_write_idx));

  spec.shape.tokens = tokens;
  spec.shape.hidden = int(hidden);
  spec.shape.max_blocks = int(max_blocks);
  spec.shape.num_blocks = int(num_blocks);
  spec.shape.block_write_idx = int(block_write_idx);
  spec.shape.has_delta = r.boolean("has_delta", true);
  spec.shape.has_output_norm = r.boolean("has_output_norm", true);
  spec.eps = r.number("eps", 1e-6);
  if (!(spec.eps >= 0.0) || !std::isfinite(spec.eps))
    r.fail("eps", fmt::format("must be finite and >= 0, got {}", spec.eps));
  spec.output_norm_eps = r.number("output_norm_eps", 1e-6);
  if (!(spec.output_norm_eps >= 0.0) || !std::isfinite(spec.output_norm_eps))
    r.fail("output_norm_eps", fmt::format("must be finite and >= 0, got {}", spec.output_norm_eps));
  spec.shape.eps = float(spec.eps);
  spec.shape.output_norm_eps = float(spec.output_norm_eps);
  r.choice("dtype", {"bf16"}, "bf16");
  spec.seed = r.unsigned_integer("seed", 0);
  const std::string kernel = r.choice("kernel", {"auto", "native", "portable"}, "auto");
  spec.kernel = kernel == "native"     ? KernelChoice::native
                : kernel == "portable" ? KernelChoice::portable
                                       : KernelChoice::automatic;
  spec.layout_guard = r.boolean("layout_guard", true);

  spec.strides.prefix = spec.strides.delta = spec.strides.output = hidden;
  set_token_major_blocks(spec.strides, int(max_blocks), hidden);
  spec.distributions = default_distributions();
  if (const json* tensors = r.find("tensors")) {
    ObjectReader t(*tensors, r.path("tensors"));
    struct Entry {
      Operand operand;
      int dims;                          // of the tensor: [T, H] 2, blocks 3, weights 1
      std::optional<InputTensor> input;  // null: nothing to generate
      bool present;
      const char* absent_because;
    };
    const Entry entries[] = {
        {Operand::prefix, 2, InputTensor::prefix, true, ""},
        {Operand::delta, 2, InputTensor::delta, spec.shape.has_delta, "has_delta is false"},
        {Operand::blocks, 3, InputTensor::blocks, true, ""},
        {Operand::output, 2, std::nullopt, true, ""},
        {Operand::norm_weight, 1, InputTensor::norm_weight, true, ""},
        {Operand::qk_weight, 1, InputTensor::qk_weight, true, ""},
        {Operand::output_norm_weight, 1, InputTensor::output_norm_weight, spec.shape.has_output_norm,
         "has_output_norm is false"},
    };
    for (const Entry& entry : entries) {
      const char* key = to_string(entry.operand);
      const json* field = t.find(key);
      if (!field) continue;
      if (!entry.present) t.fail(key, fmt::format("given, but {}", entry.absent_because));
      ObjectReader tensor(*field, t.path(key));
      parse_tensor_layout(tensor, entry.operand, entry.dims, spec);
      if (entry.input) {
        if (const json* dist = tensor.find("dist"))
          spec.distributions[int(*entry.input)] = parse_distribution(
              *dist, tensor.path("dist"), spec.distributions[int(*entry.input)], *entry.input == InputTensor::blocks);
        const std::size_t scales = spec.distributions[int(*entry.input)].block_scales.size();
        if (scales > std::size_t(max_blocks))
          ObjectReader(tensor.find("dist") ? *tensor.find("dist") : *field, tensor.path("dist"))
              .fail("block_scales", fmt::format("has {} entries, but max_blocks is {}", scales, max_blocks));
      }
      tensor.reject_unknown_keys();
    }
    t.reject_unknown_keys();
  }
  require_float32_range(spec, file, r.path("tensors"));
  if (const std::optional<LayoutViolation> violation = layout_violation(spec.shape, spec.strides, kMaxTensorElements)) {
    // Only a stride list makes elements overlap: the shorthands keep rows at least H apart.
    const json* tensors = r.find("tensors");
    if (violation->too_large || !tensors)
      r.fail("T", fmt::format("tensor sizes overflow: {} needs more than 2^40 elements of storage with T = {}",
                              to_string(violation->operand), tokens));
    ObjectReader in_tensors(*tensors, r.path("tensors"));
    const char* name = to_string(violation->operand);
    const json* tensor = in_tensors.find(name);
    if (!tensor) in_tensors.fail(name, violation->message);
    ObjectReader(*tensor, in_tensors.path(name)).fail("stride", violation->message);
  }

  if (const json* tolerance = r.find("tolerance")) {
    ObjectReader tol(*tolerance, r.path("tolerance"));
    spec.atol = tol.number("atol", spec.atol);
    spec.rtol = tol.number("rtol", spec.rtol);
    if (!(spec.atol >= 0.0) || !std::isfinite(spec.atol))
      tol.fail("atol", fmt::format("must be finite and >= 0, got {}", spec.atol));
    if (!(spec.rtol >= 0.0) || !std::isfinite(spec.rtol))
      tol.fail("rtol", fmt::format("must be finite and >= 0, got {}", spec.rtol));
    tol.reject_unknown_keys();
  }
  if (const json* expect = r.find("expect")) {
    ObjectReader e(*expect, r.path("expect"));
    const std::string verdict = e.choice("verdict", {"pass", "reject"}, "pass");
    spec.expect = verdict == "reject" ? Expectation::reject : Expectation::pass;
    spec.expectation_written = true;
    if (spec.expect == Expectation::reject)
      spec.expected_message = e.string("message", "");
    else if (e.has("message"))
      e.fail("message", "only a \"reject\" expectation has a message");
    e.reject_unknown_keys();
  }
  if (const json* checks = r.find("checks")) {
    if (!checks->is_array()) r.fail("checks", fmt::format("must be a list of names, got {}", json_type_name(*checks)));
    for (std::size_t i = 0; i < checks->size(); ++i) {
      const json& name = (*checks)[i];
      const std::optional<CaseProperty> property =
          name.is_string() ? parse_case_property(name.get<std::string>()) : std::nullopt;
      if (!property)
        throw JsonInputError(r.path("checks") + "/" + std::to_string(i),
                             fmt::format("must be one of {}, got {}", case_property_names(),
                                         name.is_string() ? quoted_literal(name.get<std::string>()) : name.dump()));
      spec.checks = united(spec.checks, {*property});
    }
  }
  r.reject_unknown_keys();
  return spec;
}

CaseSpec parse_case(const json& value, const std::string& file, const std::string& pointer) {
  try {
    return parse_case_fields(value, file, pointer);
  } catch (const JsonInputError& e) {
    throw CaseParseError(CaseLoadError{file, e.pointer(), e.what()});
  }
}

void parse_case_text(std::string_view text, const std::string& file, LoadedCases& out) {
  json document;
  try {
    document = parse_json_strict(text, {kMaxJsonDepth, kMaxCasesPerFile});
  } catch (const JsonInputError& e) {
    out.errors.push_back({file, e.pointer(), e.what()});
    return;
  }
  std::size_t bad = 0;
  auto parse_one = [&](const json& value, const std::string& pointer) {
    try {
      out.cases.push_back(parse_case(value, file, pointer));
      return;
    } catch (const CaseParseError& e) {
      if (++bad <= kMaxErrorsPerFile) out.errors.push_back(e.error());
    } catch (const std::exception& e) {
      if (++bad <= kMaxErrorsPerFile) out.errors.push_back({file, pointer, e.what()});
    }
  };
  if (document.is_array()) {
    if (document.empty()) out.errors.push_back({file, "", "holds an empty list of cases"});
    for (std::size_t i = 0; i < document.size(); ++i) parse_one(document[i], "/" + std::to_string(i));
  } else {
    parse_one(document, "");
  }
  if (bad > kMaxErrorsPerFile)
    out.errors.push_back(
        {file, "",
         fmt::format("{} more bad entries not listed (the first {} are)", bad - kMaxErrorsPerFile, kMaxErrorsPerFile)});
}

namespace {

// Every failure while reading one file becomes an error naming that file: one bad file never
// costs the others their results.
void load_file(const std::string& file, LoadedCases& out) {
  const BoundedFile read = read_bounded_file(file, kMaxCaseFileBytes, "case files");
  if (!read.error.empty())
    out.errors.push_back({file, "", read.error});
  else
    parse_case_text(read.text, file, out);
}

struct DirectoryId {
  dev_t device;
  ino_t inode;
  std::string path;
};

struct DirectoryIdHash {
  std::size_t operator()(const std::pair<dev_t, ino_t>& id) const {
    return std::hash<std::uint64_t>()(std::uint64_t(id.first) * 0x9E3779B97F4A7C15ull ^ std::uint64_t(id.second));
  }
};

// What a walk below the directories given has seen: each real directory is read once, however
// many symlinks lead to it (a "diamond" of links would otherwise double the work per level).
struct CaseFileWalk {
  std::vector<DirectoryId> ancestors;
  std::unordered_set<std::pair<dev_t, ino_t>, DirectoryIdHash> visited;
  std::vector<std::string> files;
  std::vector<CaseLoadError>& errors;
  std::vector<std::string>& opted_out;
  std::size_t files_found = 0;  // below every directory given
  bool too_many = false;
};

// Why a directory's cases run only when it is named itself (its kOptInMarker's first line), if
// they do.
std::optional<std::string> opt_in_reason(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / kOptInMarker;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  // Only a regular file is opened: a FIFO would block the walk.
  if (!std::filesystem::is_regular_file(path, ec)) return std::string(kOptInMarker);
  std::ifstream marker(path);
  if (!marker) return std::string(kOptInMarker);
  std::string line(kMaxOptInReason, '\0');
  marker.getline(line.data(), std::streamsize(line.size()));
  line.resize(std::strlen(line.c_str()));
  return line.empty() ? std::string(kOptInMarker) : printable(line);
}

// Adds the *.json files below `dir`. Directory symlinks are followed; one that leads back to
// a directory being read (a loop), an unreadable directory and an entry that cannot be
// examined are each an error naming their own path, and the walk goes on. A directory already
// read through another path is not read again.
void collect_case_files(const std::filesystem::path& dir, CaseFileWalk& walk) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    walk.errors.push_back({dir.string(), "", "cannot read directory: " + ec.message()});
    return;
  }
  std::vector<fs::path> entries;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    entries.push_back(it->path());
  }
  if (ec) walk.errors.push_back({dir.string(), "", "cannot read directory: " + ec.message()});
  std::sort(entries.begin(), entries.end());
  for (const fs::path& entry : entries) {
    if (walk.too_many) return;
    const bool is_json = entry.extension() == ".json";
    struct stat status {};
    if (::stat(entry.c_str(), &status) != 0) {
      const int error = errno;
      if (error == ELOOP)
        walk.errors.push_back({entry.string(), "", "symlink loop: skipped"});
      else if (is_json || error != ENOENT)
        walk.errors.push_back({entry.string(), "", std::string("cannot read: ") + std::strerror(error)});
      continue;
    }
    if (S_ISDIR(status.st_mode)) {
      if (const std::optional<std::string> why = opt_in_reason(entry)) {
        walk.opted_out.push_back(fmt::format("{}: not read: its cases run only when the directory is named ({})",
                                             printable(entry.string()), *why));
        continue;
      }
      const auto loop = std::find_if(walk.ancestors.begin(), walk.ancestors.end(), [&](const DirectoryId& a) {
        return a.device == status.st_dev && a.inode == status.st_ino;
      });
      if (loop != walk.ancestors.end()) {
        walk.errors.push_back({entry.string(), "", fmt::format("symlink loop: leads back to {}; skipped", loop->path)});
        continue;
      }
      if (!walk.visited.insert({status.st_dev, status.st_ino}).second) continue;
      walk.ancestors.push_back({status.st_dev, status.st_ino, entry.string()});
      collect_case_files(entry, walk);
      walk.ancestors.pop_back();
    } else if (S_ISREG(status.st_mode) && is_json) {
      if (walk.files_found++ == kMaxCaseFiles) {
        walk.errors.push_back({entry.string(), "",
                               fmt::format("more than {} case files below the directories given; the "
                                           "rest are not read",
                                           kMaxCaseFiles)});
        walk.too_many = true;
        return;
      }
      walk.files.push_back(entry.string());
    }
  }
}

}  // namespace

LoadedCases load_cases(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  LoadedCases out;
  CaseFileWalk walk{{}, {}, {}, out.errors, out.opted_out};
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      struct stat status {};
      walk.ancestors.clear();
      if (::stat(path.c_str(), &status) == 0) {
        if (!walk.visited.insert({status.st_dev, status.st_ino}).second) continue;
        walk.ancestors.push_back({status.st_dev, status.st_ino, path});
      }
      walk.files.clear();
      const std::size_t errors_before = out.errors.size();
      collect_case_files(path, walk);
      std::sort(walk.files.begin(), walk.files.end());
      if (walk.files.empty() && out.errors.size() == errors_before)
        out.errors.push_back({path, "", "directory holds no .json case files"});
      for (const auto& file : walk.files) load_file(file, out);
    } else if (fs::exists(path, ec)) {
      load_file(path, out);
    } else {
      out.errors.push_back({path, "", "no such file or directory"});
    }
  }
  // Names identify cases in reports, filters and repro bundles.
  std::unordered_map<std::string, std::string> first_location;
  std::vector<CaseSpec> unique;
  for (auto& spec : out.cases) {
    const auto [twin, first] = first_location.emplace(spec.name, spec.location());
    if (!first)
      out.errors.push_back({spec.file, spec.pointer + "/name",
                            fmt::format("duplicate case name \"{}\" (also at {})", spec.name, twin->second)});
    else
      unique.push_back(std::move(spec));
  }
  out.cases = std::move(unique);
  return out;
}

namespace {

json distribution_to_json(const DistributionSpec& d) {
  json j;
  switch (d.kind) {
    case DistributionKind::normal:
      j = {{"kind", "normal"}, {"mean", d.mean}, {"std", d.std}, {"divide_by_sqrt_hidden", d.divide_by_sqrt_hidden}};
      break;
    case DistributionKind::uniform: j = {{"kind", "uniform"}, {"low", d.low}, {"high", d.high}}; break;
    case DistributionKind::constant: j = {{"kind", "constant"}, {"value", d.value}}; break;
  }
  if (!d.block_scales.empty()) j["block_scales"] = d.block_scales;
  return j;
}

}  // namespace

json case_to_json(const CaseSpec& spec) {
  const AttnResStrides& st = spec.strides;
  json tensors;
  auto add = [&](Operand operand, json fields) {
    if (const std::int64_t offset = st.storage_offset[int(operand)]) fields["storage_offset"] = offset;
    if (operand != Operand::output) fields["dist"] = distribution_to_json(spec.distributions[int(operand)]);
    tensors[to_string(operand)] = std::move(fields);
  };
  // Rows at least H apart (blocks: token-major) have the shorthand; any other layout its list.
  const std::int64_t hidden = spec.shape.hidden;
  auto rows = [&](std::int64_t stride) {
    return stride >= hidden ? json{{"row_stride", stride}} : json{{"stride", {stride, 1}}};
  };
  add(Operand::prefix, rows(st.prefix));
  if (spec.shape.has_delta) add(Operand::delta, rows(st.delta));
  const bool token_major =
      st.blocks_token == std::int64_t(spec.shape.max_blocks) * st.blocks_row && st.blocks_row >= hidden;
  add(Operand::blocks,
      token_major ? json{{"row_stride", st.blocks_row}} : json{{"stride", {st.blocks_token, st.blocks_row, 1}}});
  add(Operand::output, rows(st.output));
  add(Operand::norm_weight, json::object());
  add(Operand::qk_weight, json::object());
  if (spec.shape.has_output_norm) add(Operand::output_norm_weight, json::object());
  json written = {{"schema_version", kCaseSchemaVersion},
                  {"name", spec.name},
                  {"description", spec.description},
                  {"T", spec.shape.tokens},
                  {"H", spec.shape.hidden},
                  {"max_blocks", spec.shape.max_blocks},
                  {"num_blocks", spec.shape.num_blocks},
                  {"block_write_idx", spec.shape.block_write_idx},
                  {"has_delta", spec.shape.has_delta},
                  {"has_output_norm", spec.shape.has_output_norm},
                  {"eps", spec.eps},
                  {"output_norm_eps", spec.output_norm_eps},
                  {"dtype", "bf16"},
                  {"seed", spec.seed},
                  {"kernel", to_string(spec.kernel)},
                  {"layout_guard", spec.layout_guard},
                  {"tensors", tensors},
                  {"tolerance", {{"atol", spec.atol}, {"rtol", spec.rtol}}}};
  // Only the case file's own expectation: the rest follows from the kernel that runs it.
  if (spec.expectation_written) {
    written["expect"] = {{"verdict", spec.expect == Expectation::reject ? "reject" : "pass"}};
    if (spec.expect == Expectation::reject && !spec.expected_message.empty())
      written["expect"]["message"] = spec.expected_message;
  }
  if (!spec.checks.empty()) {
    written["checks"] = json::array();
    for (const CaseProperty property : spec.checks) written["checks"].push_back(to_string(property));
  }
  return written;
}

}  // namespace attnres
