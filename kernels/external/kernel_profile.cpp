#include "kernels/external/kernel_profile.h"

#include <stdexcept>

#include <fmt/format.h>

#include "app/casefile/json_io.h"
#include "app/casefile/object_reader.h"

namespace attnres {
namespace {

using nlohmann::json;

constexpr std::uintmax_t kMaxProfileBytes = 1 << 20;

RefusalRule parse_rule(const json& entry, const std::string& pointer) {
  ObjectReader reader(entry, pointer);
  RefusalRule rule;
  const std::string when = reader.string("when");
  const std::optional<RefusalCondition> condition = refusal_condition_named(when);
  if (!condition)
    reader.fail("when",
                fmt::format("unknown condition {} (known: {})", quoted_literal(when), refusal_condition_names()));
  rule.when = *condition;
  if (takes_value(rule.when)) {
    rule.value = reader.integer("value");
    if (rule.value < 1) reader.fail("value", fmt::format("{} takes a positive integer value", to_string(rule.when)));
  } else if (reader.has("value")) {
    reader.fail("value", fmt::format("{} takes no value", to_string(rule.when)));
  }
  rule.mode = reader.choice("mode", {"must", "may"}) == "must" ? RefusalMode::must : RefusalMode::may;
  if (reader.has("message")) {
    rule.message = reader.string("message");
    if (rule.message.empty()) reader.fail("message", "a non-empty string (leave it out to accept any message)");
    try {
      refusal_message(rule, AttnResShape{}, AttnResStrides{});
    } catch (const std::invalid_argument& e) {
      reader.fail("message", e.what());
    }
  }
  reader.reject_unknown_keys();
  return rule;
}

KernelPreconditions parse_profile(const json& document) {
  ObjectReader reader(document, "");
  if (reader.integer("schema_version") != 1) reader.fail("schema_version", "must be 1");
  reader.string("description", "");
  const json* refuses = reader.find("refuses");
  if (!refuses || !refuses->is_array())
    reader.fail("refuses", "required: a list of refusal rules (empty: the kernel computes every case)");
  reader.reject_unknown_keys();
  KernelPreconditions preconditions;
  for (std::size_t i = 0; i < refuses->size(); ++i)
    preconditions.refusals.push_back(parse_rule((*refuses)[i], fmt::format("/refuses/{}", i)));
  return preconditions;
}

}  // namespace

KernelPreconditions load_kernel_profile(const std::string& preset_or_path) {
  if (std::optional<KernelPreconditions> preset = preset_preconditions(preset_or_path)) return *preset;
  const BoundedFile file = read_bounded_file(preset_or_path, kMaxProfileBytes, "profiles");
  if (!file.error.empty())
    throw std::invalid_argument(fmt::format("--profile {}: not a preset ({}) and {}", preset_or_path,
                                            fmt::join(preset_names(), ", "), file.error));
  try {
    const json document = parse_json_strict(file.text);
    KernelPreconditions preconditions = parse_profile(document);
    preconditions.source = "profile " + preset_or_path;
    return preconditions;
  } catch (const JsonInputError& e) {
    throw std::invalid_argument(
        fmt::format("--profile {}: {}{}", preset_or_path, e.pointer().empty() ? "" : e.pointer() + ": ", e.what()));
  }
}

}  // namespace attnres
