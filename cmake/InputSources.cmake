# The host code that reads what other people wrote (case files, safetensors files) and builds
# a case's tensors from it, and the host checks after a run: plain C++, no CUDA. Built into the
# tool and into the fuzz targets.
set(ATTNRES_INPUT_SOURCES
  app/case_layout.cpp
  app/case_spec.cpp
  app/checks.cpp
  app/json_io.cpp
  app/host_tensors.cpp
  kernels/host_generator.cpp
  app/safetensors.cpp
  kernels/cpu_kernels.cpp
  kernels/dispatch.cpp
  kernels/layout_guard.cpp
  reference/cpu_reference.cpp)
