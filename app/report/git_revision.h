// The source tree's git revision the tool was built from (cmake/git_revision.cmake writes it at
// every build), for --version, reports and repro bundles.
#pragma once

namespace attnres {

extern const char* const kGitRevision;

}  // namespace attnres
