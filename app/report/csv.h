// CSV as RFC 4180 has it: comma-separated, a field holding a comma, quote or line break quoted
// with its quotes doubled, CRLF line ends.
#pragma once
#include <string>
#include <vector>

namespace attnres {

std::string csv_row(const std::vector<std::string>& fields);

}  // namespace attnres
