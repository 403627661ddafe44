// What the tool's build generates (cmake/git_revision.cmake), for the fuzz targets' reports.
#include "app/report/git_revision.h"

namespace attnres {

const char* const kGitRevision = "fuzz";

}  // namespace attnres
