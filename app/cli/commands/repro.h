// `attnres-check repro`: one case run and written as a bug-report bundle (app/bundle/bundle.h).
#pragma once
#include "app/cli/cli.h"
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput repro_command(const Invocation& invocation);

}  // namespace attnres
