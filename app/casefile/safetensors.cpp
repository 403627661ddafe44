#include "app/casefile/safetensors.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <istream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/casefile/file_input.h"
#include "app/casefile/file_output.h"
#include "app/casefile/input_checksum.h"
#include "app/casefile/json_io.h"
#include "kernels/common/checked_size.h"

namespace attnres {

using nlohmann::json;

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

int dtype_size(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  return 0;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string error_text(const std::string& file, const std::string& field, const std::string& message) {
  return field.empty() ? fmt::format("{}: {}", file, message) : fmt::format("{}: {}: {}", file, field, message);
}

}  // namespace

SafetensorsError::SafetensorsError(std::string file, std::string field, std::string message)
    : std::runtime_error(error_text(file, field, message)),
      file_(std::move(file)),
      field_(std::move(field)),
      message_(std::move(message)) {}

const SafetensorEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = dump_json(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));
  try {
    AtomicFile out(path);
    out.write(length, 8);
    out.write(text.data(), text.size());
    for (const auto& t : file.tensors) out.write(t.bytes.data(), t.bytes.size());
    out.commit();
  } catch (const std::runtime_error& e) {
    // AtomicFile's message begins with the path, which SafetensorsError adds itself.
    const std::string what = e.what();
    throw SafetensorsError(path, "", what.rfind(path + ": ", 0) == 0 ? what.substr(path.size() + 2) : what);
  }
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::optional<RegularFile> file;
  try {
    file.emplace(path);
  } catch (const std::runtime_error& e) {
    throw SafetensorsError(path, "", e.what());
  }
  RegularFileBuffer buffer(*file);
  std::istream in(&buffer);
  return parse_safetensors(in, file->size(), path);
}

SafetensorsFile parse_safetensors(std::istream& in, std::uint64_t file_size, const std::string& path) {
  auto fail = [&](const std::string& field, const std::string& what) { return SafetensorsError(path, field, what); };
  if (file_size < 8)
    throw fail("", fmt::format("truncated: {} bytes, shorter than the 8-byte header length", file_size));
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  if (!in) throw fail("", "cannot read the header length");
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= std::uint64_t(length[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8)
    throw fail("", fmt::format("header length {} does not fit the {}-byte file", header_size, file_size));
  std::string text(header_size, '\0');
  in.read(text.data(), std::streamsize(header_size));
  if (!in) throw fail("", "cannot read the header");
  json header;
  try {
    header = parse_json_strict(text);
  } catch (const JsonInputError& e) {
    throw fail(e.pointer(), fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) throw fail("", "header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - header_size;
  SafetensorsFile file;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const std::string field = "/" + escape_pointer_token(valid_utf8(name));
    if (name == "__metadata__") {
      if (!it->is_object()) throw fail(field, "must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) throw fail(field + "/" + escape_pointer_token(valid_utf8(m.key())), "must be a string");
        file.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& entry = *it;
    if (!entry.is_object()) throw fail(field, "must be an object");
    SafetensorEntry t;
    t.name = name;
    if (!entry.contains("dtype") || !entry["dtype"].is_string())
      throw fail(field + "/dtype", "missing or not a string");
    t.dtype = entry["dtype"].get<std::string>();
    const int element_size = dtype_size(t.dtype);
    if (!element_size) throw fail(field + "/dtype", fmt::format("unknown dtype {}", quoted_literal(t.dtype)));
    if (!entry.contains("shape") || !entry["shape"].is_array()) throw fail(field + "/shape", "missing or not a list");
    CheckedSize elements = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
        throw fail(field + "/shape", "dimensions must be integers in [0, 2^63)");
      t.shape.push_back(d.get<std::int64_t>());
      elements = elements * t.shape.back();
    }
    const CheckedSize stored_bytes = elements * element_size;
    if (!stored_bytes.ok())
      throw fail(field + "/shape", fmt::format("{} holds too many elements", shape_text(t.shape)));
    const json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw fail(field + "/data_offsets", "must be [begin, end]");
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      throw fail(field + "/data_offsets",
                 fmt::format("[{}, {}] lies outside the {}-byte data (file truncated?)", begin, end, data_size));
    if (end - begin != std::uint64_t(*stored_bytes.get()))
      throw fail(field + "/data_offsets",
                 fmt::format("{} bytes for shape {} of {}", end - begin, shape_text(t.shape), t.dtype));
    ranges.emplace_back(begin, end);
    file.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw fail("", "tensor data ranges overlap");
  // Only now, with every range proven inside the file, is any tensor data read.
  for (SafetensorEntry& t : file.tensors) {
    const json& offsets = header[t.name]["data_offsets"];
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    t.bytes.resize(std::size_t(end - begin));
    in.seekg(std::streamoff(8 + header_size + begin));
    in.read(reinterpret_cast<char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
    if (!in) throw fail("/" + escape_pointer_token(valid_utf8(t.name)), "cannot read its data");
  }
  return file;
}

void add_strided(SafetensorsFile& file, const HostTensor& tensor, int dims, const std::string& name) {
  SafetensorEntry entry;
  entry.name = name;
  entry.dtype = "BF16";
  entry.shape = {tensor.span()};
  entry.bytes.resize(std::size_t(tensor.span()) * sizeof(bf16_bits));
  if (!entry.bytes.empty()) std::memcpy(entry.bytes.data(), tensor.base(), entry.bytes.size());  // none: empty storage
  file.tensors.push_back(std::move(entry));
  std::vector<std::int64_t> shape{tensor.columns}, stride{1};
  if (dims == 3) {
    shape.insert(shape.begin(), tensor.inner);
    stride.insert(stride.begin(), tensor.inner_stride);
  }
  if (dims >= 2) {
    shape.insert(shape.begin(), tensor.outer);
    stride.insert(stride.begin(), tensor.outer_stride);
  }
  file.metadata[name + ".shape"] = json(shape).dump();
  file.metadata[name + ".stride"] = json(stride).dump();
  file.metadata[name + ".storage_offset"] = std::to_string(tensor.offset);
}

SafetensorsFile inputs_file(const CaseSpec& spec, const CaseTensors& t) {
  const AttnResShape& s = t.shape;
  SafetensorsFile file;
  file.metadata["format"] = "attnres-check inputs v1";
  file.metadata["case"] = dump_json(case_to_json(spec));
  add_strided(file, t.prefix, 2, "prefix");
  if (s.has_delta) add_strided(file, t.delta, 2, "delta");
  add_strided(file, t.blocks, 3, "blocks");
  add_strided(file, t.norm_weight, 1, "norm_weight");
  add_strided(file, t.qk_weight, 1, "qk_weight");
  if (s.has_output_norm) add_strided(file, t.output_norm_weight, 1, "output_norm_weight");
  for (const HostTensor* tensor : t.all())
    if (!tensor->empty() && tensor->name != "output") file.metadata["checksum." + tensor->name] = checksum(*tensor);
  return file;
}

namespace {

// A tensor's logical shape and strides: from metadata, else its stored shape, dense.
struct View {
  std::vector<std::int64_t> shape, stride;
  std::int64_t offset = 0;
};

// Strict decimal: digits only, no sign, space or fraction, within int64.
std::optional<std::int64_t> parse_count(const std::string& text) {
  std::int64_t value = 0;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

View view_of(const SafetensorsFile& file, const SafetensorEntry& entry, const std::string& path) {
  auto fail = [&](const std::string& key, const std::string& what) {
    return SafetensorsError(path, key.empty() ? entry.name : "/__metadata__/" + escape_pointer_token(key), what);
  };
  auto list = [&](const std::string& key) {
    std::vector<std::int64_t> values;
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end()) return values;
    json parsed;
    try {
      parsed = parse_json_strict(it->second);
    } catch (const JsonInputError&) {
      throw fail(key, "not a JSON list");
    }
    if (!parsed.is_array() || parsed.empty()) throw fail(key, "must be a non-empty list of integers");
    for (const json& v : parsed) {
      if (!v.is_number_unsigned() || v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
        throw fail(key, "must be a list of integers in [0, 2^63)");
      values.push_back(v.get<std::int64_t>());
    }
    return values;
  };
  View view;
  view.shape = list(entry.name + ".shape");
  view.stride = list(entry.name + ".stride");
  if (!file.metadata.count(entry.name + ".shape")) view.shape = entry.shape;
  if (view.shape.empty()) throw fail("", "a 0-d tensor; expected [T, H], [T, MAXB, H] or [H]");
  if (view.stride.empty()) {
    view.stride.assign(view.shape.size(), 1);
    CheckedSize dense = 1;
    for (std::size_t i = view.shape.size(); i-- > 1;) {
      dense = dense * view.shape[i];
      if (!dense.ok()) throw fail("", fmt::format("shape {} holds too many elements", shape_text(view.shape)));
      view.stride[i - 1] = *dense.get();
    }
  }
  if (view.stride.size() != view.shape.size())
    throw fail(entry.name + ".stride",
               fmt::format("{} strides for a {}-d shape", view.stride.size(), view.shape.size()));
  if (view.stride.back() != 1) throw fail(entry.name + ".stride", "the innermost stride must be 1");
  if (auto it = file.metadata.find(entry.name + ".storage_offset"); it != file.metadata.end()) {
    const std::optional<std::int64_t> offset = parse_count(it->second);
    if (!offset)
      throw fail(entry.name + ".storage_offset",
                 fmt::format("must be a decimal integer in [0, 2^63), got {}", quoted_literal(it->second)));
    view.offset = *offset;
  }
  return view;
}

// The elements a view reaches, in [offset, offset + extent): proven inside `stored`, or an error.
void require_inside(const View& view, const SafetensorEntry& entry, const std::string& path) {
  const std::int64_t stored = std::int64_t(entry.bytes.size() / sizeof(bf16_bits));
  CheckedSize last = view.offset;
  bool empty = false;
  for (std::size_t i = 0; i < view.shape.size(); ++i) {
    empty = empty || view.shape[i] == 0;
    last = last + (CheckedSize(view.shape[i]) - 1) * view.stride[i];
  }
  if (empty) return;
  if (!(last + 1).within(stored))
    throw SafetensorsError(
        path, entry.name,
        fmt::format("shape {} with strides {} and storage offset {} reaches past its {} stored elements",
                    shape_text(view.shape), shape_text(view.stride), view.offset, stored));
}

}  // namespace

ReplayInputs::ReplayInputs(SafetensorsFile file, std::string path, CaseSpec& spec, bool verify_checksums)
    : file_(std::move(file)) {
  auto fail = [&](const std::string& field, const std::string& what) { return SafetensorsError(path, field, what); };
  auto index_of = [&](const std::string& name) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < file_.tensors.size(); ++i)
      if (file_.tensors[i].name == name) return i;
    return std::nullopt;
  };
  auto require = [&](const std::string& name) {
    const std::optional<std::size_t> i = index_of(name);
    if (!i) throw fail("", fmt::format("no tensor \"{}\"", name));
    return *i;
  };
  const std::size_t prefix = require("prefix");
  const View prefix_view = view_of(file_, file_.tensors[prefix], path);
  if (prefix_view.shape.size() != 2)
    throw fail("prefix", fmt::format("expected shape [T, H], got {}", shape_text(prefix_view.shape)));
  const std::int64_t tokens = prefix_view.shape[0], hidden = prefix_view.shape[1];
  if (tokens < 0 || tokens > kMaxTokens || hidden < 8 || hidden % 8 || hidden > kMaxHidden)
    throw fail("prefix", fmt::format("shape {} needs T in [0, 2^31] and H a multiple of 8 in [8, 65536]",
                                     shape_text(prefix_view.shape)));
  const std::size_t blocks = require("blocks");
  const View blocks_view = view_of(file_, file_.tensors[blocks], path);
  if (blocks_view.shape.size() != 3 || blocks_view.shape[0] != tokens || blocks_view.shape[2] != hidden)
    throw fail("blocks",
               fmt::format("expected shape [{}, MAXB, {}], got {}", tokens, hidden, shape_text(blocks_view.shape)));
  const std::int64_t max_blocks = blocks_view.shape[1];
  if (max_blocks < spec.shape.num_blocks || max_blocks > 64)
    throw fail("blocks", fmt::format("MAXB {} must be in [num_blocks ({}), 64]", max_blocks, spec.shape.num_blocks));
  if (spec.shape.block_write_idx >= max_blocks)
    throw fail("blocks", fmt::format("block_write_idx {} of the case is out of range for MAXB {}",
                                     spec.shape.block_write_idx, max_blocks));

  // Every tensor: BF16, the expected shape, no two elements sharing storage, every element
  // inside the data.
  auto source = [&](std::size_t index, const View& view, const std::vector<std::int64_t>& expected) {
    const SafetensorEntry& entry = file_.tensors[index];
    if (entry.dtype != "BF16") throw fail(entry.name, fmt::format("dtype {} (only BF16 is supported)", entry.dtype));
    if (view.shape != expected)
      throw fail(entry.name, fmt::format("expected shape {}, got {}", shape_text(expected), shape_text(view.shape)));
    require_inside(view, entry, path);
    // [T, H], blocks [T, MAXB, H] (rows: its (token, block) pairs) or a [H] weight (one row).
    StridedLayout layout;
    layout.columns = hidden;
    layout.offset = view.offset;
    layout.outer = view.shape.size() >= 2 ? view.shape[0] : 1;
    layout.outer_stride = view.shape.size() >= 2 ? view.stride[0] : hidden;
    if (view.shape.size() == 3) {
      layout.inner = view.shape[1];
      layout.inner_stride = view.stride[1];
    }
    if (!layout.overlap_free())
      throw fail(entry.name, fmt::format("strides {} make elements share storage (rows of {} elements)",
                                         shape_text(view.stride), hidden));
    return Source{index, true, layout};
  };
  prefix_ = source(prefix, prefix_view, {tokens, hidden});
  blocks_ = source(blocks, blocks_view, {tokens, max_blocks, hidden});
  const std::optional<std::size_t> delta = index_of("delta");
  if (delta) delta_ = source(*delta, view_of(file_, file_.tensors[*delta], path), {tokens, hidden});
  const std::size_t norm_weight = require("norm_weight"), qk_weight = require("qk_weight");
  norm_weight_ = source(norm_weight, view_of(file_, file_.tensors[norm_weight], path), {hidden});
  qk_weight_ = source(qk_weight, view_of(file_, file_.tensors[qk_weight], path), {hidden});
  const std::optional<std::size_t> output_norm_weight = index_of("output_norm_weight");
  if (output_norm_weight)
    output_norm_weight_ =
        source(*output_norm_weight, view_of(file_, file_.tensors[*output_norm_weight], path), {hidden});

  if (verify_checksums) {
    for (const Source* s : {&prefix_, &delta_, &blocks_, &norm_weight_, &qk_weight_, &output_norm_weight_}) {
      if (!s->present) continue;
      const SafetensorEntry& entry = file_.tensors[s->entry];
      const auto stored = file_.metadata.find("checksum." + entry.name);
      if (stored == file_.metadata.end()) continue;
      const std::string field = "/__metadata__/checksum." + escape_pointer_token(entry.name);
      // mix64sum, or the FNV-1a 64 of files written by earlier versions.
      const bool fnv = stored->second.rfind("fnv1a64:", 0) == 0;
      if (!fnv && stored->second.rfind("mix64sum:", 0) != 0)
        throw fail(field, fmt::format("{} is not a checksum this tool knows (mix64sum:<hex> or fnv1a64:<hex>)",
                                      quoted_literal(stored->second)));
      Fnv1a64 hash;
      std::uint64_t sum = 0;
      for (std::int64_t row = 0; row < s->layout.rows(); ++row) {
        const std::int64_t start = s->layout.offset + s->layout.row_start(row);
        for (std::int64_t col = 0; col < hidden; ++col) {
          const std::size_t byte = std::size_t(start + col) * 2;
          const bf16_bits bits = bf16_bits(entry.bytes[byte] | (entry.bytes[byte + 1] << 8));
          if (fnv)
            hash.add(bits);
          else
            sum += checksum_term(std::uint64_t(row * hidden + col), bits);
        }
      }
      const std::string computed = fnv ? hash.text() : checksum_text(sum);
      if (computed != stored->second)
        throw fail(field,
                   fmt::format("the data gives {}, the file says {}: the tensor was changed after it was written "
                               "(--no-verify-checksums replays it anyway)",
                               computed, valid_utf8(stored->second)));
    }
  }

  spec.shape.tokens = tokens;
  spec.shape.hidden = int(hidden);
  spec.shape.max_blocks = int(max_blocks);
  spec.shape.has_delta = delta.has_value();
  spec.shape.has_output_norm = output_norm_weight.has_value();
  // The inputs' layouts are the file's; the output keeps the case's (the bundle's case.json).
  spec.strides.prefix = prefix_.layout.outer_stride;
  if (delta) spec.strides.delta = delta_.layout.outer_stride;
  spec.strides.blocks_token = blocks_.layout.outer_stride;
  spec.strides.blocks_row = blocks_.layout.inner_stride;
  const Source* sources[] = {&prefix_, &delta_, &blocks_, &norm_weight_, &qk_weight_, &output_norm_weight_};
  for (int i = 0; i < 6; ++i) spec.strides.storage_offset[i] = sources[i]->layout.offset;
  if (!StridedLayout{tokens, spec.strides.output, 1, 0, hidden, 0}.overlap_free()) spec.strides.output = hidden;
  shape_ = spec.shape;
  strides_ = spec.strides;
}

std::int64_t ReplayInputs::held_bytes() const {
  std::int64_t bytes = 0;
  for (const SafetensorEntry& t : file_.tensors) bytes += std::int64_t(t.bytes.size());
  return bytes;
}

CaseTensors ReplayInputs::tensors() const {
  CaseTensors t = allocate_case_tensors(shape_, strides_);
  auto fill = [&](HostTensor& target, const Source& s) {
    if (!s.present) return;
    const SafetensorEntry& entry = file_.tensors[s.entry];
    // The storage as the file holds it, padding included; past the file's data (the last row's
    // padding may lie there) the canary stays. Logical elements are proven inside.
    const std::int64_t count = std::min(std::int64_t(entry.bytes.size() / sizeof(bf16_bits)), target.span());
    if (count > 0) std::memcpy(target.base(), entry.bytes.data(), std::size_t(count) * sizeof(bf16_bits));
  };
  fill(t.prefix, prefix_);
  fill(t.delta, delta_);
  fill(t.blocks, blocks_);
  fill(t.norm_weight, norm_weight_);
  fill(t.qk_weight, qk_weight_);
  fill(t.output_norm_weight, output_norm_weight_);
  return t;
}

}  // namespace attnres
