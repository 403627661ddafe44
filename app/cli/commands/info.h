// `attnres-check info`: the device, the native images in the build, the kernel registry, and
// what would run each case and why.
#pragma once
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct InfoArguments {
  std::vector<std::string> paths;  // case files or directories
};

CommandOptions add_info_command(CLI::App& app, InfoArguments& args, CommonArguments& common);

CommandOutput info_command(const InfoArguments& args, const CommonArguments& common);

}  // namespace attnres
