// `attnres-check run`: the selected cases judged, each case's rows printed as it is judged, the
// reports written; external kernels and --devices in worker processes.
#pragma once
#include "app/cli/cli.h"
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput run_command(const Invocation& invocation, const Progress& progress, const TextSink& stream);

}  // namespace attnres
