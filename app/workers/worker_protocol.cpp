#include "app/workers/worker_protocol.h"

#include <unistd.h>

#include <cstdio>
#include <optional>

#include <cuda_runtime_api.h>

#include "app/bundle/bundle.h"
#include "app/casefile/json_io.h"
#include "app/engine/command_output.h"
#include "app/report/result_json.h"
#include "app/workers/ipc.h"
#include "kernels/common/cuda_check.h"

namespace attnres {

using nlohmann::json;

namespace {

[[noreturn]] void finish(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// One request answered (worker_protocol.h has their forms).
json answer_request(const json& request, const std::vector<CaseSpec>& cases, const InputSource* replay,
                    Backend& backend, const RunOptions& options, const BackendOptions& backend_options) {
  if (request.contains("index"))
    return {
        {"result", result_json(run_case(cases.at(request.at("index").get<std::size_t>()), backend, options, replay))}};
  const CaseSpec spec =
      parse_case(request.at("case"), request.at("file").get<std::string>(), request.at("pointer").get<std::string>());
  RunOptions this_case = options;
  this_case.disable_layout_guard = request.at("disable_layout_guard").get<bool>();
  if (!request.contains("bundle")) return {{"result", result_json(run_case(spec, backend, this_case))}};
  const json& bundle = request.at("bundle");
  std::optional<CaseResult> judged_in_run;
  if (bundle.contains("judged_in_run")) judged_in_run = result_from_json(bundle.at("judged_in_run"));
  CommandOutput out;
  const CaseResult result =
      write_repro_bundle(spec, backend, this_case, backend_options, bundle.at("dir").get<std::string>(),
                         bundle.at("force").get<bool>(), out, judged_in_run ? &*judged_in_run : nullptr);
  return {{"result", result_json(result)}, {"text", out.text}, {"notes", out.notes}};
}

}  // namespace

json worker_options_json(const BackendOptions& backend, const RunOptions& options) {
  json properties = json::array();
  for (const CaseProperty property : options.properties) properties.push_back(to_string(property));
  return {{"backend",
           {{"backend", backend.backend},
            {"device_model", backend.device_model},
            {"native_images", backend.native_images ? json(*backend.native_images) : json()},
            {"kernel", backend.kernel},
            {"torch_library", backend.torch_library},
            {"signature", backend.signature},
            {"arguments", backend.arguments},
            {"profile", backend.profile},
            {"device", backend.device},
            {"timeout_seconds", backend.timeout_seconds}}},
          {"run",
           {{"disable_layout_guard", options.disable_layout_guard},
            {"host_bytes", options.budget.host_bytes ? json(*options.budget.host_bytes) : json()},
            {"device_bytes", options.budget.device_bytes ? json(*options.budget.device_bytes) : json()},
            {"kernel", options.kernel},
            {"error_maps", options.error_maps},
            {"properties", properties}}}};
}

void worker_options_from_json(const json& j, BackendOptions& backend, RunOptions& options) {
  const json& b = j.at("backend");
  b.at("backend").get_to(backend.backend);
  b.at("device_model").get_to(backend.device_model);
  if (!b.at("native_images").is_null()) backend.native_images = b.at("native_images").get<std::string>();
  b.at("kernel").get_to(backend.kernel);
  b.at("torch_library").get_to(backend.torch_library);
  b.at("signature").get_to(backend.signature);
  b.at("arguments").get_to(backend.arguments);
  b.at("profile").get_to(backend.profile);
  b.at("device").get_to(backend.device);
  b.at("timeout_seconds").get_to(backend.timeout_seconds);
  const json& r = j.at("run");
  r.at("disable_layout_guard").get_to(options.disable_layout_guard);
  if (!r.at("host_bytes").is_null()) options.budget.host_bytes = r.at("host_bytes").get<std::int64_t>();
  if (!r.at("device_bytes").is_null()) options.budget.device_bytes = r.at("device_bytes").get<std::int64_t>();
  r.at("kernel").get_to(options.kernel);
  r.at("error_maps").get_to(options.error_maps);
  options.properties.clear();
  for (const json& name : r.at("properties")) {
    const std::optional<CaseProperty> property = parse_case_property(name.get<std::string>());
    if (!property) throw std::runtime_error("unknown property " + name.get<std::string>());
    options.properties.push_back(*property);
  }
}

void serve_requests(int socket, const std::vector<CaseSpec>& cases, const InputSource* replay,
                    const WorkerBackendMaker& make_backend, const RunOptions& options,
                    const BackendOptions& backend_options) {
  auto say = [&](const json& message) {
    if (!send_all(socket, dump_json(message) + "\n")) finish(1);
  };
  std::unique_ptr<Backend> backend;
  std::string notes;
  int device_count = 0;
  try {
    backend = make_backend(notes);
    if (backend->name() == "cuda") ATTNRES_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  } catch (const UsageError& e) {
    say({{"fatal", e.what()}, {"usage", true}});
    finish(0);
  } catch (const std::exception& e) {
    say({{"fatal", e.what()}, {"usage", false}});
    finish(0);
  }
  const DeviceDescription device = backend->device();
  say({{"backend", backend->name()},
       {"notes", notes},
       {"device", describe_device(device)},
       {"device_count", device_count}});
  LineReader requests(socket);
  while (const std::optional<std::string> line = requests.next()) {
    json answer;
    try {
      answer = answer_request(json::parse(*line), cases, replay, *backend, options, backend_options);
    } catch (const UsageError& e) {  // e.g. a bundle directory that is not empty
      answer = {{"error", e.what()}, {"usage", true}};
    } catch (const std::exception& e) {
      answer = {{"error", e.what()}, {"usage", false}};
    }
    // A lost CUDA context would fail every later case here: the parent starts a fresh worker.
    answer["restart"] = !backend->usable();
    say(answer);
  }
  finish(0);
}

}  // namespace attnres
