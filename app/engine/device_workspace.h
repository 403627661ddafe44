// The CUDA backend's workspace: a case's tensors made on the device and kept there from
// generation to verdict; the reference, the comparison and the checks run there and return
// summaries. Host copies are made only for a repro bundle.
#pragma once
#include <memory>

#include "app/engine/case_workspace.h"
#include "kernels/registry/device.h"

namespace attnres {

// `device`: the current device. `usable` is cleared when a fault leaves the CUDA context unusable
// for later cases.
std::unique_ptr<CaseWorkspace> make_device_workspace(const CaseSpec& spec, const InputSource* inputs,
                                                     bool keep_artifacts, const DeviceDescription& device,
                                                     bool& usable);

// What make_device_workspace and its workspace allocate at most, on the device and the host.
CaseFootprint device_workspace_footprint(const AttnResShape& shape, const AttnResStrides& strides, bool keep_artifacts,
                                         bool replayed);

}  // namespace attnres
