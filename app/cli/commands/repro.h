// `attnres-check repro`: one case run and written as a bug-report bundle (app/bundle/bundle.h).
#pragma once
#include <string>

#include "app/cli/options.h"
#include "app/engine/command_output.h"

namespace attnres {

struct ReproArguments {
  std::string case_path;
  std::string case_name;  // which case of the file; default: the only one
  std::string out_dir;
  bool no_layout_guard = false;
  bool force = false;  // empty a non-empty out_dir first
};

CommandOptions add_repro_command(CLI::App& app, ReproArguments& args, CommonArguments& common);

CommandOutput repro_command(const ReproArguments& args, const CommonArguments& common);

}  // namespace attnres
