#!/usr/bin/env bash
# cmake --install into a temporary prefix, then the installed binary as a new user runs it:
# with no case argument it runs the installed bundled cases; the header, man page, bridges and
# the Python package (in PYTHON_DIR under the prefix) are where the README says.
# Usage: install_test.sh BUILD_DIR PYTHON PYTHON_DIR
set -euo pipefail
build=$1 python=$2 python_dir=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/attnres-check"
test -f "$prefix/include/attnres/kernel_abi.h"
test -f "$prefix/share/attnres-check/cases/guard.json"
PYTHONPATH="$prefix/$python_dir" "$python" -c 'import attnres_check.binding, attnres_check.capture'
# pytest finds the plugin through the package's entry point, without -p.
if "$python" -c 'import pytest' 2>/dev/null; then
  pytest_help=$(cd "$prefix" && PYTHONPATH="$prefix/$python_dir" "$python" -m pytest --help)
  grep -q -- '--attnres-cases' <<<"$pytest_help"
fi
# Installed under the interpreter's own prefix, the package needs no PYTHONPATH: the directory is
# one the interpreter searches there.
"$python" -c "import sys; sys.exit(not any(p.endswith('/$python_dir') for p in sys.path))"
if command -v help2man >/dev/null; then grep -q 'attnres-check' "$prefix/share/man/man1/attnres-check.1"; fi
if [ -f "$build/libattnres_python_bridge.so" ]; then test -f "$prefix/lib/attnres-check/libattnres_python_bridge.so"; fi
cd "$prefix"  # no ./cases here: the default must be the installed ones
out=$("$prefix/bin/attnres-check" run --backend cpu --filter guard- --list)
echo "$out"
[ "$(echo "$out" | wc -l)" -eq 4 ]
"$prefix/bin/attnres-check" run --backend cpu --filter seed | tail -n 1 | grep -q '1 case, 1 rejected-as-expected'
"$prefix/bin/attnres-check" --version | grep -q 'git '
echo "install: 1 passed, 0 failed"
