#include "app/cli/commands/info.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/casefile/case_spec.h"
#include "app/cli/command_support.h"
#include "app/report/git_revision.h"
#include "kernels/native/launch_native.h"

namespace attnres {

CommandOptions add_info_command(CLI::App& app, InfoArguments& args, CommonArguments& common) {
  CommandOptions command(
      app.add_subcommand("info", "the device, the native images in the build, and each case's path"));
  command.app()->add_option("cases", args.paths, "case files or directories");
  add_backend_options(command, common.backend);
  default_to_bundled_cases(command, args.paths);
  return command;
}

CommandOutput info_command(const InfoArguments& args, const CommonArguments& common) {
  CommandOutput out;
  std::unique_ptr<Backend> backend = make_backend(common.backend, out.notes);
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
  LoadedCases loaded = load_cases(args.paths);
  if (args.paths.empty()) out.notes += std::string(kNoBundledCases) + "\n";
  out.text += fmt::format("{} cases:\n", loaded.cases.size());
  out.text += case_plan(loaded.cases, loaded.errors, *backend, common.backend.kernel);
  out.exit_code = loaded.errors.empty() ? kExitOk : kExitBadInput;
  return out;
}

}  // namespace attnres
