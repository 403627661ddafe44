#!/usr/bin/env bash
# cmake --install into a temporary prefix, then the installed binary as a new user runs it:
# with no case argument it runs the installed bundled cases; the header, man page and bridges
# are where the README says.
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/attnres-check"
test -f "$prefix/include/attnres/kernel_abi.h"
test -f "$prefix/share/attnres-check/cases/guard.json"
PYTHONPATH="$prefix/share/attnres-check" python3 -c 'import attnres_capture' 
if command -v help2man >/dev/null; then grep -q 'attnres-check' "$prefix/share/man/man1/attnres-check.1"; fi
if [ -f "$build/libattnres_python_bridge.so" ]; then test -f "$prefix/lib/attnres-check/libattnres_python_bridge.so"; fi
cd "$prefix"  # no ./cases here: the default must be the installed ones
out=$("$prefix/bin/attnres-check" run --backend cpu --filter guard- --list)
echo "$out"
[ "$(echo "$out" | wc -l)" -eq 4 ]
"$prefix/bin/attnres-check" run --backend cpu --filter seed | tail -n 1 | grep -q '1 case, 1 rejected-as-expected'
"$prefix/bin/attnres-check" --version | grep -q 'git '
echo "install: 1 passed, 0 failed"
