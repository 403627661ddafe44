#include "app/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

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

}  // namespace

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
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : file.tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  if (!out) throw SafetensorsError(fmt::format("{}: cannot write file", path));
}

SafetensorsFile read_safetensors(const std::string& path) {
  auto fail = [&](const std::string& what) { return SafetensorsError(fmt::format("{}: {}", path, what)); };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw fail("cannot open file");
  const std::uint64_t file_size = std::uint64_t(in.tellg());
  in.seekg(0);
  if (file_size < 8) throw fail(fmt::format("truncated: {} bytes, shorter than the 8-byte header length", file_size));
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= std::uint64_t(length[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8)
    throw fail(fmt::format("header length {} does not fit the {}-byte file", header_size, file_size));
  std::string text(header_size, '\0');
  in.read(text.data(), std::streamsize(header_size));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    throw fail(fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - header_size;
  SafetensorsFile file;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) throw fail("/__metadata__: must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) throw fail(fmt::format("/__metadata__/{}: must be a string", m.key()));
        file.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& entry = *it;
    if (!entry.is_object()) throw fail(fmt::format("/{}: must be an object", name));
    SafetensorEntry t;
    t.name = name;
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) throw fail(fmt::format("/{}/dtype: missing or not a string", name));
    t.dtype = entry["dtype"].get<std::string>();
    const int element_size = dtype_size(t.dtype);
    if (!element_size) throw fail(fmt::format("/{}/dtype: unknown dtype \"{}\"", name, t.dtype));
    if (!entry.contains("shape") || !entry["shape"].is_array()) throw fail(fmt::format("/{}/shape: missing or not a list", name));
    std::uint64_t elements = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned()) throw fail(fmt::format("/{}/shape: dimensions must be integers >= 0", name));
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim && elements > (std::uint64_t(1) << 62) / dim) throw fail(fmt::format("/{}/shape: too many elements", name));
      elements *= dim;
      t.shape.push_back(std::int64_t(dim));
    }
    const json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw fail(fmt::format("/{}/data_offsets: must be [begin, end]", name));
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      throw fail(fmt::format("/{}/data_offsets: [{}, {}] lies outside the {}-byte data (file truncated?)", name, begin, end, data_size));
    if (end - begin != elements * std::uint64_t(element_size))
      throw fail(fmt::format("/{}/data_offsets: {} bytes for shape {} of {}", name, end - begin, shape_text(t.shape), t.dtype));
    ranges.emplace_back(begin, end);
    t.bytes.resize(end - begin);
    in.seekg(std::streamoff(8 + header_size + begin));
    in.read(reinterpret_cast<char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
    if (!in) throw fail(fmt::format("/{}: cannot read its data", name));
    file.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw fail("tensor data ranges overlap");
  return file;
}

void add_strided(SafetensorsFile& file, const HostTensor& tensor, const std::vector<std::int64_t>& shape,
                 const std::vector<std::int64_t>& stride, const std::string& name) {
  SafetensorEntry entry;
  entry.name = name;
  entry.dtype = "BF16";
  entry.shape = {tensor.span()};
  entry.bytes.resize(std::size_t(tensor.span()) * sizeof(bf16_bits));
  std::memcpy(entry.bytes.data(), tensor.data(), entry.bytes.size());
  file.tensors.push_back(std::move(entry));
  file.metadata[name + ".shape"] = json(shape).dump();
  file.metadata[name + ".stride"] = json(stride).dump();
  file.metadata[name + ".storage_offset"] = "0";
}

SafetensorsFile inputs_file(const CaseSpec& spec, const CaseTensors& t) {
  const AttnResShape& s = t.shape;
  SafetensorsFile file;
  file.metadata["format"] = "attnres-check inputs v1";
  file.metadata["case"] = case_to_json(spec).dump();
  add_strided(file, t.prefix, {s.tokens, s.hidden}, {t.prefix.row_stride, 1}, "prefix");
  if (s.has_delta) add_strided(file, t.delta, {s.tokens, s.hidden}, {t.delta.row_stride, 1}, "delta");
  add_strided(file, t.blocks, {s.tokens, s.max_blocks, s.hidden},
              {std::int64_t(s.max_blocks) * t.blocks.row_stride, t.blocks.row_stride, 1}, "blocks");
  add_strided(file, t.norm_weight, {s.hidden}, {1}, "norm_weight");
  add_strided(file, t.qk_weight, {s.hidden}, {1}, "qk_weight");
  if (s.has_output_norm) add_strided(file, t.output_norm_weight, {s.hidden}, {1}, "output_norm_weight");
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

View view_of(const SafetensorsFile& file, const SafetensorEntry& entry, const std::string& path) {
  auto fail = [&](const std::string& what) { return SafetensorsError(fmt::format("{}: {}", path, what)); };
  auto list = [&](const std::string& key) {
    std::vector<std::int64_t> values;
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end()) return values;
    try {
      const json parsed = json::parse(it->second);
      if (!parsed.is_array() || parsed.empty()) throw fail(fmt::format("/__metadata__/{}: must be a list of integers", key));
      for (const json& v : parsed) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
          throw fail(fmt::format("/__metadata__/{}: must be a list of integers >= 0", key));
        values.push_back(v.get<std::int64_t>());
      }
    } catch (const json::parse_error&) {
      throw fail(fmt::format("/__metadata__/{}: not a JSON list", key));
    }
    return values;
  };
  View view;
  view.shape = list(entry.name + ".shape");
  view.stride = list(entry.name + ".stride");
  if (view.shape.empty()) view.shape = entry.shape;
  if (view.stride.empty()) {
    view.stride.assign(view.shape.size(), 1);
    for (std::size_t i = view.shape.size(); i-- > 1;) view.stride[i - 1] = view.stride[i] * view.shape[i];
  }
  if (view.stride.size() != view.shape.size())
    throw fail(fmt::format("/__metadata__/{}.stride: {} strides for a {}-d shape", entry.name, view.stride.size(), view.shape.size()));
  if (view.stride.back() != 1) throw fail(fmt::format("{}: the innermost stride must be 1", entry.name));
  if (auto it = file.metadata.find(entry.name + ".storage_offset"); it != file.metadata.end()) {
    try {
      view.offset = std::stoll(it->second);
    } catch (const std::exception&) {
      throw fail(fmt::format("/__metadata__/{}.storage_offset: not an integer", entry.name));
    }
    if (view.offset < 0) throw fail(fmt::format("/__metadata__/{}.storage_offset: must be >= 0", entry.name));
  }
  return view;
}

}  // namespace

CaseTensors read_inputs_safetensors(const std::string& path, CaseSpec& spec) {
  const SafetensorsFile file = read_safetensors(path);
  auto fail = [&](const std::string& what) { return SafetensorsError(fmt::format("{}: {}", path, what)); };
  auto require = [&](const std::string& name) -> const SafetensorEntry& {
    const SafetensorEntry* e = file.find(name);
    if (!e) throw fail(fmt::format("no tensor \"{}\"", name));
    return *e;
  };
  const SafetensorEntry& prefix = require("prefix");
  const View prefix_view = view_of(file, prefix, path);
  if (prefix_view.shape.size() != 2) throw fail(fmt::format("prefix: expected shape [T, H], got {}", shape_text(prefix_view.shape)));
  const std::int64_t tokens = prefix_view.shape[0], hidden = prefix_view.shape[1];
  if (tokens < 1 || hidden < 8 || hidden % 8 || hidden > 65536)
    throw fail(fmt::format("prefix: shape {} needs T >= 1 and H a multiple of 8 in [8, 65536]", shape_text(prefix_view.shape)));
  const SafetensorEntry& blocks = require("blocks");
  const View blocks_view = view_of(file, blocks, path);
  if (blocks_view.shape.size() != 3 || blocks_view.shape[0] != tokens || blocks_view.shape[2] != hidden)
    throw fail(fmt::format("blocks: expected shape [{}, MAXB, {}], got {}", tokens, hidden, shape_text(blocks_view.shape)));
  const std::int64_t max_blocks = blocks_view.shape[1];
  if (max_blocks < spec.shape.num_blocks || max_blocks > 64)
    throw fail(fmt::format("blocks: MAXB {} must be in [num_blocks ({}), 64]", max_blocks, spec.shape.num_blocks));
  if (blocks_view.stride[0] != max_blocks * blocks_view.stride[1])
    throw fail(fmt::format("blocks: strides {} are not token-major [MAXB * s, s, 1]", shape_text(blocks_view.stride)));

  spec.shape.tokens = tokens;
  spec.shape.hidden = int(hidden);
  spec.shape.max_blocks = int(max_blocks);
  spec.shape.has_delta = file.find("delta") != nullptr;
  spec.shape.has_output_norm = file.find("output_norm_weight") != nullptr;
  if (spec.shape.block_write_idx >= max_blocks)
    throw fail(fmt::format("block_write_idx {} of the case is out of range for MAXB {}", spec.shape.block_write_idx, max_blocks));
  spec.prefix_row_stride = prefix_view.stride[0];
  spec.blocks_row_stride = blocks_view.stride[1];
  spec.output_row_stride = std::max<std::int64_t>(spec.output_row_stride, hidden);

  CaseTensors t;
  t.shape = spec.shape;
  auto fill = [&](HostTensor& target, const SafetensorEntry& entry, const View& view, std::vector<std::int64_t> expected) {
    if (entry.dtype != "BF16") throw fail(fmt::format("{}: dtype {} (only BF16 is supported)", entry.name, entry.dtype));
    if (view.shape != expected)
      throw fail(fmt::format("{}: expected shape {}, got {}", entry.name, shape_text(expected), shape_text(view.shape)));
    if (view.shape.size() >= 2 && view.stride[view.stride.size() - 2] < hidden)
      throw fail(fmt::format("{}: row stride {} is below H ({})", entry.name, view.stride[view.stride.size() - 2], hidden));
    const std::int64_t stored = std::int64_t(entry.bytes.size() / sizeof(bf16_bits));
    const std::int64_t row_stride = view.shape.size() >= 2 ? view.stride[view.stride.size() - 2] : hidden;
    const std::int64_t rows = view.shape.size() == 3 ? view.shape[0] * view.shape[1] : view.shape.size() == 2 ? view.shape[0] : 1;
    const std::int64_t needed = view.offset + (rows - 1) * row_stride + hidden;
    if (stored < needed)
      throw fail(fmt::format("{}: {} stored elements, but shape {} with strides {} needs {}", entry.name, stored,
                             shape_text(view.shape), shape_text(view.stride), needed));
    target = make_tensor(entry.name, rows, hidden, row_stride);
    const auto* source = reinterpret_cast<const bf16_bits*>(entry.bytes.data()) + view.offset;
    for (std::int64_t row = 0; row < rows; ++row)
      for (std::int64_t col = 0; col < row_stride && row * row_stride + col < stored - view.offset; ++col)
        target.at(row, col) = source[row * row_stride + col];
  };
  fill(t.prefix, prefix, prefix_view, {tokens, hidden});
  if (spec.shape.has_delta) {
    const SafetensorEntry& delta = require("delta");
    const View delta_view = view_of(file, delta, path);
    fill(t.delta, delta, delta_view, {tokens, hidden});
    spec.delta_row_stride = t.delta.row_stride;
  } else {
    t.delta = make_tensor("delta", 0, hidden, hidden);
  }
  fill(t.blocks, blocks, blocks_view, {tokens, max_blocks, hidden});
  const SafetensorEntry& norm_weight = require("norm_weight");
  fill(t.norm_weight, norm_weight, view_of(file, norm_weight, path), {hidden});
  const SafetensorEntry& qk_weight = require("qk_weight");
  fill(t.qk_weight, qk_weight, view_of(file, qk_weight, path), {hidden});
  if (spec.shape.has_output_norm) {
    const SafetensorEntry& onw = require("output_norm_weight");
    fill(t.output_norm_weight, onw, view_of(file, onw, path), {hidden});
  } else {
    t.output_norm_weight = make_tensor("output_norm_weight", 0, hidden, hidden);
  }
  t.output = make_tensor("output", tokens, hidden, spec.output_row_stride);
  for (std::int64_t row = 0; row < tokens; ++row)
    for (std::int64_t col = 0; col < hidden; ++col) t.output.at(row, col) = kPoisonBits;
  return t;
}

}  // namespace attnres
