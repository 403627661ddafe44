#include "app/cli/commands/info.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/casefile/case_spec.h"
#include "app/report/git_revision.h"
#include "kernels/native/launch_native.h"

namespace attnres {

CommandOutput info_command(const Invocation& inv) {
  CommandOutput out;
  std::unique_ptr<Backend> backend = make_backend(inv.backend, out.notes);
  const DeviceDescription device = backend->device();
  const NativeImages images = backend->native_images();
  out.text += fmt::format("attnres-check {} (git {})\n", ATTNRES_VERSION, kGitRevision);
  out.text += fmt::format("backend: {}\n", backend->name());
  out.text += fmt::format("device: {}\n", describe_device(device));
  out.text += fmt::format("native images in this build: {}\n", fmt::join(compiled_native_images(), ", "));
  if (backend->name() == "cuda") {
    const NativeImageQuery query = query_native_image();
    out.text +=
        fmt::format("native image loadable on this device: {} ({})\n", query.loadable ? "yes" : "no", query.detail);
  }
  out.text += fmt::format("dispatcher sees: sm_90a image {}, sm_100a image {}\n", images.sm90a ? "yes" : "no",
                          images.sm100a ? "yes" : "no");
  out.text += fmt::format("kernels in the registry: {}\n", fmt::join(backend->kernels().names(), ", "));
  LoadedCases loaded = load_cases(inv.info_paths);
  if (inv.info_paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
  out.text += fmt::format("{} cases:\n", loaded.cases.size());
  out.text += case_plan(loaded.cases, loaded.errors, *backend, inv.backend.kernel);
  out.exit_code = loaded.errors.empty() ? kExitOk : kExitBadInput;
  return out;
}

}  // namespace attnres
