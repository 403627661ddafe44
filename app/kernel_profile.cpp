#include "app/kernel_profile.h"

#include <stdexcept>

#include <fmt/format.h>

#include "app/json_io.h"

namespace attnres {
namespace {

using nlohmann::json;

constexpr std::uintmax_t kMaxProfileBytes = 1 << 20;

RefusalRule parse_rule(const json& entry, const std::string& pointer) {
  if (!entry.is_object()) throw JsonInputError(pointer, "a refusal rule is an object");
  for (const auto& [key, value] : entry.items())
    if (key != "when" && key != "value" && key != "mode" && key != "message")
      throw JsonInputError(pointer + "/" + escape_pointer_token(key), "unknown field (known: when, value, mode, message)");
  RefusalRule rule;
  const auto when = entry.find("when");
  if (when == entry.end() || !when->is_string()) throw JsonInputError(pointer + "/when", "required: a condition name");
  const std::optional<RefusalCondition> condition = refusal_condition_named(when->get<std::string>());
  if (!condition)
    throw JsonInputError(pointer + "/when", fmt::format("unknown condition {} (known: {})", quoted_literal(when->get<std::string>()),
                                                        refusal_condition_names()));
  rule.when = *condition;
  const auto value = entry.find("value");
  if (takes_value(rule.when)) {
    if (value == entry.end() || !value->is_number_integer() || value->get<std::int64_t>() < 1)
      throw JsonInputError(pointer + "/value", fmt::format("{} takes a positive integer value", to_string(rule.when)));
    rule.value = value->get<std::int64_t>();
  } else if (value != entry.end()) {
    throw JsonInputError(pointer + "/value", fmt::format("{} takes no value", to_string(rule.when)));
  }
  const auto mode = entry.find("mode");
  if (mode == entry.end() || !mode->is_string() || (*mode != "may" && *mode != "must"))
    throw JsonInputError(pointer + "/mode", "required: \"must\" (computing it is a failure) or \"may\" (refusing or computing)");
  rule.mode = *mode == "must" ? RefusalMode::must : RefusalMode::may;
  if (const auto message = entry.find("message"); message != entry.end()) {
    if (!message->is_string() || message->get<std::string>().empty())
      throw JsonInputError(pointer + "/message", "a non-empty string (leave it out to accept any message)");
    rule.message = message->get<std::string>();
    try {
      refusal_message(rule, AttnResShape{}, AttnResStrides{});
    } catch (const std::invalid_argument& e) {
      throw JsonInputError(pointer + "/message", e.what());
    }
  }
  return rule;
}

KernelPreconditions parse_profile(const json& document) {
  if (!document.is_object()) throw JsonInputError("", "a profile is a JSON object with schema_version and refuses");
  for (const auto& [key, value] : document.items())
    if (key != "schema_version" && key != "refuses" && key != "description")
      throw JsonInputError("/" + escape_pointer_token(key), "unknown field (known: schema_version, description, refuses)");
  const auto version = document.find("schema_version");
  if (version == document.end() || !version->is_number_integer() || *version != 1)
    throw JsonInputError("/schema_version", "required: 1");
  const auto refuses = document.find("refuses");
  if (refuses == document.end() || !refuses->is_array())
    throw JsonInputError("/refuses", "required: a list of refusal rules (empty: the kernel computes every case)");
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
