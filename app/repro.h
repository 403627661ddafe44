// Bug-report bundles and the case shrinker.
#pragma once
#include <string>

#include "app/commands.h"

namespace attnres {

CommandOutput repro_command(const Invocation& invocation);
CommandOutput shrink_command(const Invocation& invocation);

// The standalone PyTorch script written into every bundle.
std::string repro_script();

}  // namespace attnres
