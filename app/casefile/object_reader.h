// Reads one JSON object of an untrusted file field by field: each getter checks the field's type
// and range, and every key it was not asked for is an error. Errors are JsonInputError naming the
// JSON pointer of the field; the caller adds the file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/casefile/json_io.h"

namespace attnres {

// "an integer", "a number", "string", ...: how an error names what it got.
inline const char* json_type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  return value.type_name();
}

// Reads one JSON object field by field; every key it was not asked for is an error.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& value, std::string pointer) : value_(value), pointer_(std::move(pointer)) {
    if (!value_.is_object()) fail_here(fmt::format("must be an object, got {}", json_type_name(value_)));
  }

  std::string path(const std::string& key) const { return pointer_ + "/" + escape_pointer_token(key); }

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw JsonInputError(path(key), message);
  }
  [[noreturn]] void fail_here(const std::string& message) const { throw JsonInputError(pointer_, message); }

  const nlohmann::json* find(const std::string& key) {
    asked_.insert(key);
    auto it = value_.find(key);
    return it == value_.end() ? nullptr : &*it;
  }
  bool has(const std::string& key) { return find(key) != nullptr; }

  std::int64_t integer(const std::string& key, std::optional<std::int64_t> fallback = std::nullopt) {
    const nlohmann::json* field = find(key);
    if (!field) return fallback ? *fallback : missing(key);
    if (!field->is_number_integer()) fail(key, fmt::format("must be an integer, got {}", json_type_name(*field)));
    if (field->is_number_unsigned() &&
        field->get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      fail(key, "integer out of range");
    return field->get<std::int64_t>();
  }

  std::uint64_t unsigned_integer(const std::string& key, std::uint64_t fallback) {
    const nlohmann::json* field = find(key);
    if (!field) return fallback;
    if (!field->is_number_integer()) fail(key, fmt::format("must be an integer, got {}", json_type_name(*field)));
    if (!field->is_number_unsigned()) fail(key, fmt::format("must be >= 0, got {}", field->get<std::int64_t>()));
    return field->get<std::uint64_t>();
  }

  // Exactly `count` integers in [0, limit]; nothing when the key is absent.
  std::vector<std::int64_t> integer_list(const std::string& key, std::size_t count, std::int64_t limit,
                                         const char* limit_text) {
    const nlohmann::json* field = find(key);
    if (!field) return {};
    if (!field->is_array() || field->size() != count)
      fail(key, fmt::format("must be a list of {} integers, got {}", count,
                            field->is_array() ? fmt::format("{} items", field->size()) : json_type_name(*field)));
    std::vector<std::int64_t> values;
    for (std::size_t i = 0; i < count; ++i) {
      const nlohmann::json& item = (*field)[i];
      if (!item.is_number_integer()) fail_item(key, i, fmt::format("must be an integer, got {}", json_type_name(item)));
      const bool in_range = item.is_number_unsigned()
                                ? item.get<std::uint64_t>() <= std::uint64_t(limit)
                                : item.get<std::int64_t>() >= 0 && item.get<std::int64_t>() <= limit;
      if (!in_range) fail_item(key, i, fmt::format("must be in [0, {}], got {}", limit_text, item.dump()));
      values.push_back(item.get<std::int64_t>());
    }
    return values;
  }
  [[noreturn]] void fail_item(const std::string& key, std::size_t index, const std::string& message) const {
    throw JsonInputError(path(key) + "/" + std::to_string(index), message);
  }

  double number(const std::string& key, double fallback) {
    const nlohmann::json* field = find(key);
    if (!field) return fallback;
    if (!field->is_number()) fail(key, fmt::format("must be a number, got {}", json_type_name(*field)));
    return field->get<double>();
  }

  bool boolean(const std::string& key, bool fallback) {
    const nlohmann::json* field = find(key);
    if (!field) return fallback;
    if (!field->is_boolean()) fail(key, fmt::format("must be true or false, got {}", json_type_name(*field)));
    return field->get<bool>();
  }

  std::string string(const std::string& key, std::optional<std::string> fallback = std::nullopt) {
    const nlohmann::json* field = find(key);
    if (!field) {
      if (fallback) return *fallback;
      missing(key);
    }
    if (!field->is_string()) fail(key, fmt::format("must be a string, got {}", json_type_name(*field)));
    return field->get<std::string>();
  }

  std::string choice(const std::string& key, const std::vector<std::string>& allowed,
                     std::optional<std::string> fallback = std::nullopt) {
    const std::string got = string(key, fallback);
    if (std::find(allowed.begin(), allowed.end(), got) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
      fail(key, fmt::format("must be one of {}, got {}", list, quoted_literal(got)));
    }
    return got;
  }

  // Call once every field was read.
  void reject_unknown_keys() const {
    for (auto it = value_.begin(); it != value_.end(); ++it)
      if (!asked_.count(it.key())) fail(it.key(), "unknown key");
  }

 private:
  [[noreturn]] std::int64_t missing(const std::string& key) const { fail(key, "required key is missing"); }

  const nlohmann::json& value_;
  std::string pointer_;
  std::set<std::string> asked_;
};

}  // namespace attnres
