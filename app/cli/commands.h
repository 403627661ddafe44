// The subcommands, dispatched. Each returns its text and exit code; only main writes to the terminal.
#pragma once
#include "app/cli/cli.h"
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput execute(const Invocation& invocation, const Progress& progress, const TextSink& stream = nullptr);

}  // namespace attnres
