// JSON in and out for files that other people wrote: strict parsing (duplicate keys and
// out-of-range numbers are errors, not silently resolved) and output that is always valid
// UTF-8, whatever bytes a path or message held.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attnres {

// What is wrong and where: `pointer` is a JSON pointer ("" for the document or unknown).
class JsonInputError : public std::runtime_error {
 public:
  JsonInputError(std::string pointer, const std::string& message)
      : std::runtime_error(message), pointer_(std::move(pointer)) {}
  const std::string& pointer() const { return pointer_; }

 private:
  std::string pointer_;
};

// How much structure a document may have: every walk of it recursing once per level (dump, the
// destructor, the readers) stays far inside the stack, and a flat list cannot make a reader do
// work out of proportion to what it can use.
struct JsonLimits {
  int max_depth = 32;
  std::size_t max_top_level_items = SIZE_MAX;  // a top-level list's length
};
constexpr int kMaxJsonDepth = JsonLimits{}.max_depth;

// Throws JsonInputError: not JSON (with the byte offset), a number out of range, a key given
// twice in one object (pointing at the second), nesting deeper than the limit, or a top-level
// list longer than it. The limits are checked while parsing, before the document is built.
nlohmann::json parse_json_strict(std::string_view text, const JsonLimits& limits = {});

// JSON text; invalid UTF-8 in strings is replaced by U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& value, int indent = -1);

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string valid_utf8(std::string_view text);

// The one sanitiser for text that reaches a terminal or a markdown file. Each gives valid UTF-8
// with these written as \uXXXX: control characters (C0, DEL and C1: a NUL ends a C string, an ESC
// sequence rewrites the terminal) and the invisible characters that reorder or hide text
// (bidirectional overrides and isolates, zero-width characters).
//   printable: one line (a newline in a name or key would forge a line of the table);
//   printable_lines: keeps newlines and tabs, for text that is several lines by design;
//   terminal_text: printable_lines that also keeps the tool's own colour codes; main passes
//   everything it prints through it.
std::string printable(std::string_view text);
std::string printable_lines(std::string_view text);
std::string terminal_text(std::string_view text);

// `text` as a JSON string literal, in double quotes, every control character escaped: how a
// message echoes a value taken from someone else's file or kernel.
std::string quoted_literal(std::string_view text);

// A whole input file, read only when it holds at most `max_bytes`; else `error` says why
// ("cannot open: ...", "is a FIFO: only regular files are read", "N bytes; <kind> are limited to M
// bytes").
struct BoundedFile {
  std::string text;
  std::string error;
};
BoundedFile read_bounded_file(const std::string& path, std::uintmax_t max_bytes, const char* kind);

// One JSON pointer reference token ("a/b" -> "a~1b").
std::string escape_pointer_token(std::string_view key);

}  // namespace attnres
