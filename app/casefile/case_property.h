// The properties a case can ask of a kernel beyond one correct call (run --check, a case file's
// "checks"), by the names the command line, case files and reports use.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace attnres {

enum class CaseProperty {
  determinism,       // the same call, repeated, gives the same bits
  batch_invariance,  // a row's bits do not depend on the batch's size or the row's place in it
  garbage,           // NaN, Inf and huge values in other rows, padding and unused blocks change no judged row
  stream,            // called on a non-blocking stream whose earlier work writes the inputs late, it waits for them
  pdl,               // launched with programmatic dependent launch behind a producer that triggers early, it waits
  // Captured in a CUDA graph and replayed on fresh inputs, it gives the eager call's bits. Judged
  // last: a capture that fails may leave a bridged kernel's process unusable.
  graph,
};

inline constexpr CaseProperty kAllCaseProperties[] = {CaseProperty::determinism, CaseProperty::batch_invariance,
                                                      CaseProperty::garbage,     CaseProperty::stream,
                                                      CaseProperty::pdl,         CaseProperty::graph};

inline const char* to_string(CaseProperty property) {
  switch (property) {
    case CaseProperty::determinism: return "determinism";
    case CaseProperty::batch_invariance: return "batch-invariance";
    case CaseProperty::garbage: return "garbage";
    case CaseProperty::stream: return "stream";
    case CaseProperty::pdl: return "pdl";
    case CaseProperty::graph: return "graph";
  }
  return "?";
}

inline std::optional<CaseProperty> parse_case_property(const std::string& name) {
  for (const CaseProperty property : kAllCaseProperties)
    if (name == to_string(property)) return property;
  return std::nullopt;
}

// "determinism, batch-invariance, garbage, stream, pdl, graph": what an error lists as the names there are.
inline std::string case_property_names() {
  std::string names;
  for (const CaseProperty property : kAllCaseProperties)
    names += std::string(names.empty() ? "" : ", ") + to_string(property);
  return names;
}

// `properties` with `more` added, each once, in kAllCaseProperties order.
inline std::vector<CaseProperty> united(const std::vector<CaseProperty>& properties,
                                        const std::vector<CaseProperty>& more) {
  std::vector<CaseProperty> all;
  for (const CaseProperty property : kAllCaseProperties)
    for (const auto* list : {&properties, &more})
      if (std::find(list->begin(), list->end(), property) != list->end() &&
          std::find(all.begin(), all.end(), property) == all.end())
        all.push_back(property);
  return all;
}

}  // namespace attnres
