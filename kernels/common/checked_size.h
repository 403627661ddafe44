// Size arithmetic on numbers that come from files: every product and sum is checked, so a
// hostile shape, stride or offset is an error, never a wrapped size.
#pragma once
#include <cstdint>
#include <optional>

namespace attnres {

// An int64 that remembers whether any step that produced it overflowed.
class CheckedSize {
 public:
  constexpr CheckedSize(std::int64_t value) : value_(value) {}  // NOLINT: implicit on purpose
  static constexpr CheckedSize overflowed() {
    CheckedSize c(0);
    c.overflow_ = true;
    return c;
  }

  friend CheckedSize operator*(CheckedSize a, CheckedSize b) {
    std::int64_t out = 0;
    if (a.overflow_ || b.overflow_ || __builtin_mul_overflow(a.value_, b.value_, &out)) return overflowed();
    return CheckedSize(out);
  }
  friend CheckedSize operator+(CheckedSize a, CheckedSize b) {
    std::int64_t out = 0;
    if (a.overflow_ || b.overflow_ || __builtin_add_overflow(a.value_, b.value_, &out)) return overflowed();
    return CheckedSize(out);
  }
  friend CheckedSize operator-(CheckedSize a, CheckedSize b) {
    std::int64_t out = 0;
    if (a.overflow_ || b.overflow_ || __builtin_sub_overflow(a.value_, b.value_, &out)) return overflowed();
    return CheckedSize(out);
  }

  bool ok() const { return !overflow_; }
  // The value, or nothing when a step overflowed.
  std::optional<std::int64_t> get() const { return overflow_ ? std::nullopt : std::optional<std::int64_t>(value_); }
  // True when the value is known and <= limit.
  bool within(std::int64_t limit) const { return !overflow_ && value_ <= limit; }

 private:
  std::int64_t value_;
  bool overflow_ = false;
};

}  // namespace attnres
