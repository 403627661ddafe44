// Text for XML and HTML reports.
#pragma once
#include <string>

namespace attnres {

// Valid UTF-8 (invalid bytes become U+FFFD) with XML's special characters escaped.
std::string xml_escape(const std::string& raw);

}  // namespace attnres
