#include "app/workers/make_case_runner.h"
#include "app/workers/make_backend.h"

#include "app/bundle/bundle.h"
#include "app/workers/worker.h"
#include "kernels/external/plugin_kernel.h"

namespace attnres {

namespace {

class InProcessRunner final : public CaseRunner {
 public:
  InProcessRunner(const BackendOptions& backend, RunOptions options, std::string& notes)
      : CaseRunner(std::move(options)), backend_options_(backend), backend_(make_backend(backend, notes)) {}

  CaseResult run(const CaseSpec& spec, bool disable_layout_guard) override {
    RunOptions options = options_;
    options.disable_layout_guard = disable_layout_guard;
    return run_case(spec, *backend_, options);
  }
  CaseResult write_bundle(const CaseSpec& spec, const std::filesystem::path& dir, bool force, CommandOutput& out,
                          const CaseResult* judged_in_run) override {
    return write_repro_bundle(spec, *backend_, options_, backend_options_, dir, force, out, judged_in_run);
  }
  std::string backend_name() const override { return backend_->name(); }
  std::string device_description() const override { return describe_device(backend_->device()); }

 private:
  BackendOptions backend_options_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace

std::unique_ptr<CaseRunner> make_case_runner(const BackendOptions& backend, const RunOptions& options,
                                             std::string& notes) {
  if (is_external_kernel(backend.kernel)) {
    const BackendMaker make = [backend](int, std::string& n) { return make_backend(backend, n); };
    return make_worker_runner(make, backend, options, notes);
  }
  return std::make_unique<InProcessRunner>(backend, options, notes);
}

}  // namespace attnres
