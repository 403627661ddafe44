#include "app/casefile/json_io.h"

#include <cstdint>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "app/casefile/file_input.h"

namespace attnres {

using nlohmann::json;

BoundedFile read_bounded_file(const std::string& path, std::uintmax_t max_bytes, const char* kind) {
  try {
    RegularFile file(path);
    if (file.size() > max_bytes)
      return {"", fmt::format("{} bytes; {} are limited to {} bytes", file.size(), kind, max_bytes)};
    return {file.read_all(), ""};
  } catch (const std::runtime_error& e) {
    return {"", e.what()};
  }
}

std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
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

// The JSON pointer of the member or element each of the first `count` frames is reading.
std::string pointer_of(const std::vector<Frame>& frames, std::size_t count) {
  std::string pointer;
  for (std::size_t i = 0; i < count; ++i)
    pointer += "/" + (frames[i].array ? std::to_string(frames[i].index) : escape_pointer_token(frames[i].key));
  return pointer;
}

}  // namespace

json parse_json_strict(std::string_view text, const JsonLimits& limits) {
  std::vector<Frame> frames;
  auto element_done = [&] {
    if (frames.empty() || !frames.back().array) return;
    if (frames.size() == 1 && std::size_t(frames.back().index) >= limits.max_top_level_items)
      throw JsonInputError("", fmt::format("a list of more than {} entries", limits.max_top_level_items));
    ++frames.back().index;
  };
  auto open = [&](bool array) {
    if (int(frames.size()) >= limits.max_depth)
      throw JsonInputError(pointer_of(frames, frames.size()),
                           fmt::format("nested deeper than {} levels", limits.max_depth));
    frames.emplace_back();
    frames.back().array = array;
  };
  const json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open(false); break;
      case json::parse_event_t::array_start: open(true); break;
      case json::parse_event_t::key: {
        Frame& top = frames.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second)
          throw JsonInputError(pointer_of(frames, frames.size()),
                               fmt::format("key {} given twice", quoted_literal(top.key)));
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
    if (byte < 0x80)
      length = 1, code = byte;
    else if (byte >= 0xC2 && byte <= 0xDF)
      length = 2, code = byte & 0x1F;
    else if (byte >= 0xE0 && byte <= 0xEF)
      length = 3, code = byte & 0x0F;
    else if (byte >= 0xF0 && byte <= 0xF4)
      length = 4, code = byte & 0x07;
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

// The length of a character that rewrites or hides what a terminal or editor shows, at `at` of
// valid UTF-8 (0: none): C1 controls (U+0080..U+009F), and the invisible formatting characters
// that reorder or hide text (bidirectional overrides and isolates, marks, zero-width ones).
std::size_t hidden_control_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t k) { return at + k < text.size() ? static_cast<unsigned char>(text[at + k]) : 0u; };
  if (byte(0) == 0xC2 && byte(1) >= 0x80 && byte(1) <= 0x9F) return 2;
  if (byte(0) == 0xD8 && byte(1) == 0x9C) return 2;  // U+061C arabic letter mark
  if (byte(0) == 0xE2 && byte(1) == 0x80 &&
      ((byte(2) >= 0x8B && byte(2) <= 0x8F) || (byte(2) >= 0xA8 && byte(2) <= 0xAE)))
    return 3;  // U+200B..U+200F, U+2028..U+202E
  if (byte(0) == 0xE2 && byte(1) == 0x81 && byte(2) >= 0xA0 && byte(2) <= 0xAF) return 3;  // U+2060..U+206F
  if (byte(0) == 0xEF && byte(1) == 0xBB && byte(2) == 0xBF) return 3;                     // U+FEFF
  return 0;
}

std::uint32_t code_point(std::string_view text, std::size_t at, std::size_t length) {
  std::uint32_t code = static_cast<unsigned char>(text[at]) & (length == 2 ? 0x1F : 0x0F);
  for (std::size_t k = 1; k < length; ++k) code = (code << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  return code;
}

// The tool's own colours (SGR reset, dim, red, green, yellow): the only escape sequences that
// terminal_text lets through.
std::size_t own_colour_length(std::string_view text, std::size_t at) {
  for (const std::string_view colour : {"\033[0m", "\033[2m", "\033[31m", "\033[32m", "\033[33m"})
    if (text.substr(at, colour.size()) == colour) return colour.size();
  return 0;
}

enum class Keep { nothing, line_breaks, line_breaks_and_colours };

std::string escape_controls(std::string_view text, bool in_quotes, Keep keep) {
  const std::string valid = valid_utf8(text);
  std::string out;
  out.reserve(valid.size() + 2);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const auto byte = static_cast<unsigned char>(valid[i]);
    if (keep == Keep::line_breaks_and_colours) {
      if (const std::size_t length = own_colour_length(valid, i)) {
        out.append(valid, i, length);
        i += length - 1;
        continue;
      }
    }
    if (const std::size_t length = hidden_control_length(valid, i)) {
      out += fmt::format("\\u{:04x}", code_point(valid, i, length));
      i += length - 1;
    } else if ((byte < 0x20 || byte == 0x7F) && !(keep != Keep::nothing && (byte == '\n' || byte == '\t'))) {
      if (in_quotes && byte == '\n')
        out += "\\n";
      else if (in_quotes && byte == '\t')
        out += "\\t";
      else
        out += fmt::format("\\u{:04x}", byte);
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

std::string printable(std::string_view text) { return escape_controls(text, false, Keep::nothing); }

std::string printable_lines(std::string_view text) { return escape_controls(text, false, Keep::line_breaks); }

std::string terminal_text(std::string_view text) { return escape_controls(text, false, Keep::line_breaks_and_colours); }

std::string quoted_literal(std::string_view text) { return "\"" + escape_controls(text, true, Keep::nothing) + "\""; }

}  // namespace attnres
