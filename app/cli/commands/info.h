// `attnres-check info`: the device, the native images in the build, the kernel registry, and
// what would run each case and why.
#pragma once
#include "app/cli/cli.h"
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput info_command(const Invocation& invocation);

}  // namespace attnres
