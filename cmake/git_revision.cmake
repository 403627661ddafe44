# Writes OUTPUT, a source file holding the source tree's git revision ("+dirty" with uncommitted
# changes), and rewrites it only when that changed. Run at every build, so a repro bundle names
# the revision the tool was built from, not the one CMake was configured at.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR NOT revision)
  set(revision "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD -- RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    string(APPEND revision "+dirty")
  endif()
endif()
set(text "// Written by cmake/git_revision.cmake at build time.\n#include \"app/report/git_revision.h\"\n\nnamespace attnres {\nconst char* const kGitRevision = \"${revision}\";\n}  // namespace attnres\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
