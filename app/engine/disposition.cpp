#include "app/engine/disposition.h"

namespace attnres {

const char* to_string(Disposition disposition) {
  switch (disposition) {
    case Disposition::passed: return "passed";
    case Disposition::failed: return "failed";
    case Disposition::rejected_as_expected: return "rejected-as-expected";
    case Disposition::unexpected_rejection: return "unexpected-rejection";
    case Disposition::not_rejected: return "not-rejected";
    case Disposition::memory_violation: return "memory-violation";
    case Disposition::not_run: return "not-run";
    case Disposition::error: return "error";
    case Disposition::skipped: return "skipped";
    case Disposition::hazard: return "hazard";
  }
  return "?";
}

std::optional<Disposition> parse_disposition(const std::string& name) {
  for (int d = 0; d < kDispositionCount; ++d)
    if (name == to_string(Disposition(d))) return Disposition(d);
  return std::nullopt;
}

bool meets_expectation(Disposition disposition) {
  return disposition == Disposition::passed || disposition == Disposition::rejected_as_expected ||
         disposition == Disposition::skipped;
}

}  // namespace attnres
