# Shared by scripts/run, scripts/test and scripts/device-check: find CUDA, install missing
# Debian packages, configure and build into build/ (override with BUILD_DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"

find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1; then
    for dir in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do
      [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH" && break
    done
  fi
  command -v nvcc >/dev/null 2>&1 || { echo "attnres-check: CUDA Toolkit 13 (nvcc) not found; install it first" >&2; exit 1; }
  export CUDACXX="$(command -v nvcc)"
}

# Installs only what is missing, so a machine without network that has everything works too.
install_missing_packages() {
  local missing=()
  [ -f /usr/include/CLI/CLI.hpp ] || missing+=(libcli11-dev)
  [ -f /usr/include/fmt/format.h ] || missing+=(libfmt-dev)
  [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  [ -f /usr/include/dlpack/dlpack.h ] || missing+=(libdlpack-dev)
  [ -f /usr/include/png.h ] || missing+=(libpng-dev)
  # The bridges' dependencies, where asked for (CI does: ATTNRES_BRIDGE_DEPS=1): Debian's CPU
  # torch for the torch-op and Python bridge tests, and Python's development files.
  if [ "${ATTNRES_BRIDGE_DEPS:-0}" = 1 ]; then
    [ -f /usr/include/python3.11/Python.h ] || missing+=(python3-dev)
    [ -f /usr/share/cmake/Torch/TorchConfig.cmake ] || [ -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ] ||
      missing+=(libtorch-dev)
    /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
  fi
  # The pytest plugin's tests (tests/python/test_pytest_plugin.py).
  /usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing+=(python3-pytest)
  # The schema and JUnit reader test (tests/validate_reports.py).
  /usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1 || missing+=(python3-jsonschema)
  /usr/bin/python3 -c 'import junitparser' >/dev/null 2>&1 || missing+=(python3-junitparser)
  # The run --html rendering test (tests/html_render_test.sh).
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v help2man >/dev/null 2>&1 || missing+=(help2man)
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "attnres-check: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The first python3 that imports torch (a virtual environment's on PATH, else the system's):
# the bridges are built against it and its torch.
bridge_python_flags() {
  local python
  for python in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -x "$python" ] && "$python" -c 'import torch' >/dev/null 2>&1 || continue
    echo "-DPython3_EXECUTABLE=$python"
    echo "-DCMAKE_PREFIX_PATH=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    return
  done
}

build() {
  find_cuda
  install_missing_packages
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    local bridge_flags
    mapfile -t bridge_flags < <(bridge_python_flags)
    cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${bridge_flags[@]}" "$@"
  fi
  cmake --build "$BUILD_DIR" --parallel "$(nproc)"
}

has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}
