#!/bin/bash
# One run of the whole GPU harness on a lent GPU machine, from the repository
# root: every check (standard Adam, the optimizer family, gluon_sparse_dot),
# every timing, and a compute-sanitizer memcheck of a small subset, each under
# its own `timeout` so that a hang costs one part, not the run. Logs go to
# $OUT (default /tmp/gpu_harness_out); a PASS/FAIL summary ends the output.
# About a minute on an H200.
#
# Prepare on the development machine (no GPU needed) and carry benchmarks/gpu/build:
#   ARCHS="80 90" TARGET=all sh benchmarks/gpu/build.sh   # both libraries (else built there)
#   python benchmarks/gpu/make_family_fixtures.py          # build/fixtures, needs MXNet
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_harness_out}
mkdir -p "$OUT"
HERE=benchmarks/gpu
SUMMARY=()

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/device.txt"
echo "fixtures: $(ls $HERE/build/fixtures/*.npz 2>/dev/null | wc -l)" | tee -a "$OUT/device.txt"

# The prebuilt libraries if they load here, else a build for this GPU.
for target in adam family; do
  lib=$HERE/build/lib${target}_harness.so
  if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$lib" 2>/dev/null; then
    SUMMARY+=("library $lib: prebuilt, loaded")
  else
    arch=$(python3 -c "import torch; print('%d%d' % torch.cuda.get_device_capability())")
    if TARGET=$target ARCHS="$arch" timeout 240 sh $HERE/build.sh >"$OUT/build_$target.log" 2>&1
    then SUMMARY+=("library $lib: built for sm_$arch")
    else SUMMARY+=("library $lib: BUILD FAILED (build_$target.log)")
    fi
  fi
done

part() {  # name, time limit in seconds, command...
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? verdict=PASS
  if [ "$rc" -eq 124 ]; then verdict="FAIL (timeout ${limit} s)"; elif [ "$rc" -ne 0 ]; then verdict="FAIL (rc $rc)"; fi
  SUMMARY+=("$name: $verdict, $(grep -c '^ok ' "$OUT/$name.log") ok, $((SECONDS - start)) s")
}

H="python3 $HERE/run_harness.py"
part checks 150 $H --only adam --only family --only dot --skip-benchmark
part timing 150 $H --only adam --only family --only dot --skip-correctness
mkdir -p /tmp/memcheck_fixtures
cp $HERE/build/fixtures/sgd_mom_float32.npz $HERE/build/fixtures/rmsprop_centered_float64.npz \
  /tmp/memcheck_fixtures/ 2>/dev/null
part memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 \
  $H --only family --only dot --skip-benchmark --fixtures /tmp/memcheck_fixtures

grep -v "Warning\|csr = torch" "$OUT/timing.log"
echo
echo "==== summary: $(sed -n 2p "$OUT/device.txt")"
for line in "${SUMMARY[@]}"; do echo "$line"; done
grep -h "^FAILED\|AssertionError\|ValueError" "$OUT/checks.log" "$OUT/timing.log" | head -20
grep -h "ERROR SUMMARY" "$OUT/memcheck.log"
