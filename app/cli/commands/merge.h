// `merge`: joins the JSON reports of `run --shard k/n` jobs from a CI matrix (or of any runs)
// into one table, JSON report and JUnit XML, in the cases' original order.
#pragma once
#include "app/cli/command_support.h"

namespace attnres {

CommandOutput merge_command(const Invocation& invocation);

}  // namespace attnres
