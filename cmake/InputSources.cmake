# The host code that reads what other people wrote (case files, safetensors files, reports) and
# builds a case's tensors from it, the host checks after a run, and the files the tool writes:
# plain C++, no CUDA. Built into the tool and into the fuzz targets.
set(ATTNRES_INPUT_SOURCES
  app/case_layout.cpp
  app/case_spec.cpp
  app/checks.cpp
  app/json_io.cpp
  app/file_input.cpp
  app/file_output.cpp
  app/host_tensors.cpp
  kernels/host_generator.cpp
  app/safetensors.cpp
  kernels/cpu_kernels.cpp
  kernels/dispatch.cpp
  kernels/layout_guard.cpp
  kernels/preconditions.cpp
  reference/cpu_reference.cpp)

# The reports a run writes and `merge` reads back (the merge fuzz target's code).
set(ATTNRES_REPORT_SOURCES
  app/csv.cpp
  app/disposition.cpp
  app/error_map_image.cpp
  app/report.cpp
  app/result_json.cpp
  app/run_summary.cpp)
