#include "app/json_io.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include <fmt/format.h>

namespace attnres {

using nlohmann::json;

BoundedFile read_bounded_file(const std::string& path, std::uintmax_t max_bytes, const char* kind) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return {"", "cannot read file: " + ec.message()};
  if (size > max_bytes) return {"", fmt::format("{} bytes; {} are limited to {} bytes", size, kind, max_bytes)};
  std::ifstream stream(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  if (!stream && !stream.eof()) return {"", "cannot read file"};
  return {std::move(text), ""};
}

std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

namespace {

// Where the parser is, for naming a duplicate key by its JSON pointer.
struct Frame {
  bool array = false;
  std::int64_t index = 0;  // arrays: the element being read
  std::string key;         // objects: the member being read
  std::set<std::string> keys;
};

std::string pointer_of(const std::vector<Frame>& frames, const std::string& last_key) {
  std::string pointer;
  for (std::size_t i = 0; i + 1 < frames.size(); ++i)
    pointer += "/" + (frames[i].array ? std::to_string(frames[i].index) : escape_pointer_token(frames[i].key));
  return pointer + "/" + escape_pointer_token(last_key);
}

}  // namespace

json parse_json_strict(std::string_view text) {
  std::vector<Frame> frames;
  auto element_done = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  const json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: frames.push_back(Frame{}); break;
      case json::parse_event_t::array_start:
        frames.emplace_back();
        frames.back().array = true;
        break;
      case json::parse_event_t::key: {
        Frame& top = frames.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second)
          throw JsonInputError(pointer_of(frames, top.key), fmt::format("key {} given twice", quoted_literal(top.key)));
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames.pop_back();
        element_done();
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), track);
  } catch (const json::parse_error& e) {
    throw JsonInputError("", valid_utf8(fmt::format("not valid JSON (byte {}): {}", e.byte, e.what())));
  } catch (const json::exception& e) {  // e.g. out_of_range: a literal such as 1e400
    throw JsonInputError("", valid_utf8(fmt::format("not valid JSON: {}", e.what())));
  }
}

std::string dump_json(const json& value, int indent) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string valid_utf8(std::string_view text) {
  static constexpr const char* kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    int length = 0;
    std::uint32_t code = 0;
    if (byte < 0x80) length = 1, code = byte;
    else if (byte >= 0xC2 && byte <= 0xDF) length = 2, code = byte & 0x1F;
    else if (byte >= 0xE0 && byte <= 0xEF) length = 3, code = byte & 0x0F;
    else if (byte >= 0xF0 && byte <= 0xF4) length = 4, code = byte & 0x07;
    bool valid = length > 0 && i + std::size_t(length) <= text.size();
    for (int k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + std::size_t(k)]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (valid && ((length == 3 && code < 0x800) || (length == 4 && (code < 0x10000 || code > 0x10FFFF)) ||
                  (code >= 0xD800 && code <= 0xDFFF)))
      valid = false;
    if (valid) {
      out.append(text.substr(i, std::size_t(length)));
      i += std::size_t(length);
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

namespace {

std::string escape_controls(std::string_view text, bool in_quotes) {
  const std::string valid = valid_utf8(text);
  std::string out;
  out.reserve(valid.size() + 2);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const auto byte = static_cast<unsigned char>(valid[i]);
    // A C1 control is U+0080..U+009F, in UTF-8 0xC2 0x80..0x9F.
    const bool c1 = byte == 0xC2 && i + 1 < valid.size() && static_cast<unsigned char>(valid[i + 1]) <= 0x9F;
    const bool keep_whitespace = !in_quotes && (byte == '\n' || byte == '\t');
    if (c1) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(valid[++i]));
    } else if ((byte < 0x20 || byte == 0x7F) && !keep_whitespace) {
      if (in_quotes && byte == '\n') out += "\\n";
      else if (in_quotes && byte == '\t') out += "\\t";
      else out += fmt::format("\\u{:04x}", byte);
    } else if (in_quotes && (byte == '"' || byte == '\\')) {
      out += '\\';
      out += char(byte);
    } else {
      out += char(byte);
    }
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return escape_controls(text, false); }

std::string quoted_literal(std::string_view text) { return "\"" + escape_controls(text, true) + "\""; }

}  // namespace attnres
