#include <algorithm>

#include "kernels/registry/kernel_entry.h"

namespace attnres {

void KernelRegistry::add(std::unique_ptr<KernelEntry> entry) {
  const std::string name = entry->name();
  if (find(name)) throw std::invalid_argument("two kernels named \"" + name + "\"");
  entries_.push_back(std::move(entry));
}

KernelEntry* KernelRegistry::find(const std::string& name) const {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e->name() == name; });
  return it == entries_.end() ? nullptr : it->get();
}

std::vector<std::string> KernelRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& e : entries_) names.push_back(e->name());
  return names;
}

}  // namespace attnres
