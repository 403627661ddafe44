#include "app/report/csv.h"

#include <cstdlib>
#include <string_view>

#include "app/casefile/json_io.h"

namespace attnres {

namespace {

// A spreadsheet reads a cell that begins with = + - @ (or a tab or carriage return before one) as
// a formula: such a cell gets a leading ' (OWASP's advice), unless it is a plain number.
std::string without_formula(std::string field) {
  if (field.empty() || std::string_view("=+-@\t\r").find(field.front()) == std::string_view::npos) return field;
  char* end = nullptr;
  std::strtod(field.c_str(), &end);
  if (end == field.c_str() + field.size()) return field;
  return "'" + field;
}

}  // namespace

std::string csv_row(const std::vector<std::string>& fields) {
  std::string row;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) row += ',';
    const std::string field = without_formula(valid_utf8(fields[i]));
    if (field.find_first_of(",\"\r\n") == std::string::npos) {
      row += field;
      continue;
    }
    row += '"';
    for (const char c : field) row += c == '"' ? std::string("\"\"") : std::string(1, c);
    row += '"';
  }
  return row + "\r\n";
}

}  // namespace attnres
