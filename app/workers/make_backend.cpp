#include "app/workers/make_backend.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/engine/command_output.h"
#include "kernels/external/kernel_profile.h"
#include "kernels/external/plugin_kernel.h"

namespace attnres {

namespace {

NativeImages parse_native_images(const std::string& list) {
  NativeImages images;
  if (list == "none") return images;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string image = list.substr(start, end - start);
    if (image == "sm_90a")
      images.sm90a = true;
    else if (image == "sm_100a")
      images.sm100a = true;
    else
      throw UsageError(fmt::format("--native-images: unknown image \"{}\" (known: sm_90a, sm_100a, none)", image));
    start = end + 1;
  }
  return images;
}

// The backend with the kernel --kernel names in its registry: a built-in, or one loaded now.
std::unique_ptr<Backend> with_kernel(std::unique_ptr<Backend> backend, const BackendOptions& options) {
  const std::string& kernel = options.kernel;
  if (kernel.empty() || backend->kernels().find(kernel)) return backend;
  KernelSpec spec;
  try {
    spec = parse_kernel_spec(kernel);
  } catch (const KernelSpecError& e) {
    throw UsageError(e.what());
  }
  if (!spec.external())
    throw UsageError(
        fmt::format("--kernel: unknown kernel \"{}\" (built-in: {}; external: so:PATH[:SYMBOL], "
                    "torch-op:NAMESPACE::OP, python:MODULE:FUNCTION)",
                    kernel, fmt::join(backend->kernels().names(), ", ")));
  try {
    ExternalKernelOptions external{options.torch_library, bridge_signature(options), backend->operand_place()};
    if (!options.profile.empty()) external.preconditions = load_kernel_profile(options.profile);
    backend->add_kernel(load_external_kernel(spec, external));
  } catch (const PluginError& e) {
    throw UsageError(e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return backend;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string& note,
                                      const std::string& cuda_required_by) {
  if (options.backend == "cpu") {
    const std::optional<DeviceDescription> model = parse_device_model(options.device_model);
    if (!model)
      throw UsageError(
          fmt::format("--device-model: expected sm_<major><minor> or none, got \"{}\"", options.device_model));
    const NativeImages images =
        options.native_images ? parse_native_images(*options.native_images) : native_images_from_build();
    return with_kernel(make_cpu_backend(*model, images), options);
  }
  if (options.native_images) throw UsageError("--native-images applies to --backend cpu only");
  std::string why;
  std::unique_ptr<Backend> backend;
  try {
    backend = make_cuda_backend(why, options.device);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!backend) {
    if (!cuda_required_by.empty()) throw std::runtime_error(cuda_required_by + ": " + why);
    if (options.backend == "cuda") throw std::runtime_error("--backend cuda: " + why);
    note += fmt::format("{}: every case is not-run; --backend cpu runs the CPU stand-ins of both kernels\n", why);
    backend = make_cpu_backend(DeviceDescription{}, NativeImages{});
  }
  return with_kernel(std::move(backend), options);
}

}  // namespace attnres
