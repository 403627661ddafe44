#include "app/report/xml_text.h"

#include "app/casefile/json_io.h"

namespace attnres {

// Valid UTF-8 (invalid bytes become U+FFFD) with XML's special characters escaped.
std::string xml_escape(const std::string& raw) {
  std::string text = valid_utf8(raw);
  // U+FFFE and U+FFFF are not XML characters even when escaped.
  for (const char* noncharacter : {"\xEF\xBF\xBE", "\xEF\xBF\xBF"})
    for (std::size_t at; (at = text.find(noncharacter)) != std::string::npos;) text.replace(at, 3, "\xEF\xBF\xBD");
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
    }
  }
  return out;
}

}  // namespace attnres
