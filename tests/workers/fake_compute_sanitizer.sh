#!/bin/sh
# Stands in for compute-sanitizer in the GPU-free tests of run --sanitizer: takes its options as
# run --sanitizer passes them, runs the program, and writes a report as compute-sanitizer does:
# one error on the runs FAKE_SANITIZER_HAZARD names (1-based, counted in $FAKE_SANITIZER_STATE/count;
# then it exits with --error-exitcode's status), none on the others.
tool="" log="" code=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --log-file) log=$2; shift 2 ;;
    --error-exitcode) code=$2; shift 2 ;;
    --report-api-errors | --print-limit) shift 2 ;;
    --*) echo "fake compute-sanitizer: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -n "$tool" ] && [ -n "$log" ] && [ -n "$code" ] || { echo "fake compute-sanitizer: missing options" >&2; exit 2; }
run=$(($(cat "$FAKE_SANITIZER_STATE/count" 2>/dev/null || echo 0) + 1))
echo "$run" >"$FAKE_SANITIZER_STATE/count"
echo "$tool" >>"$FAKE_SANITIZER_STATE/tools"
"$@"
status=$?
hazard=0
for n in $FAKE_SANITIZER_HAZARD; do [ "$n" = "$run" ] && hazard=1; done
{
  echo "========= COMPUTE-SANITIZER"
  if [ $hazard = 1 ]; then
    echo "========= Invalid __global__ read of size 4 bytes"
    echo "=========     at stray_read_kernel(const float *)+0x70 in cuda_plugin.cu:190"
    echo "=========     by thread (0,0,0) in block (0,0,0)"
    echo "=========     Address 0x7f2a40000100 is out of bounds"
    echo "========= "
    echo "========= ERROR SUMMARY: 1 error"
  else
    echo "========= ERROR SUMMARY: 0 errors"
  fi
} >"$log"
[ $hazard = 1 ] && exit "$code"
exit $status
