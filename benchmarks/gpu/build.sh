#!/bin/sh
# Build a harness library from its C entry points and the operator library's
# own CUDA kernel sources.
#   TARGET=adam   (default) build/libadam_harness.so: adam_harness.cu,
#                 adam_deferred_harness.cu + adam_kernels.cu (eager standard
#                 Adam) and adam_deferred_kernels.cu (deferred Adam);
#   TARGET=family build/libfamily_harness.so: optim_harness.cu and
#                 sparse_dot_harness.cu + optim_kernels.cu (every rule of the
#                 optimizer family) and sparse_dot.cu (gluon_sparse_dot), with
#                 adam_kernels.cu and adam_deferred_kernels.cu for the index
#                 and last_step checks the family's operators borrow;
#   TARGET=all    both, at their default paths (an output path is refused).
#   TARGET=family ARCHS="75 80 90" NVCC=nvcc benchmarks/gpu/build.sh [output.so]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OPS="$HERE/../../gluon_sparse/csrc/ops"
NVCC=${NVCC:-nvcc}
ARCHS=${ARCHS:-"75 80 90"}
TARGET=${TARGET:-adam}
if [ "$TARGET" = all ]; then
  if [ $# -gt 0 ]; then
    echo "TARGET=all builds both libraries at their default paths: no output path" >&2
    exit 2
  fi
  TARGET=adam "$0"
  TARGET=family "$0"
  exit 0
fi
case "$TARGET" in
  adam)
    OUT=${1:-"$HERE/build/libadam_harness.so"}
    SOURCES="$HERE/adam_harness.cu $HERE/adam_deferred_harness.cu \
      $OPS/adam_kernels.cu $OPS/adam_deferred_kernels.cu" ;;
  family)
    OUT=${1:-"$HERE/build/libfamily_harness.so"}
    SOURCES="$HERE/optim_harness.cu $HERE/sparse_dot_harness.cu $OPS/optim_kernels.cu \
      $OPS/sparse_dot.cu $OPS/adam_kernels.cu $OPS/adam_deferred_kernels.cu" ;;
  *)
    echo "TARGET must be adam, family or all, not $TARGET" >&2
    exit 2 ;;
esac
mkdir -p "$(dirname "$OUT")"
GENCODE=""
LAST=""
for arch in $ARCHS; do
  GENCODE="$GENCODE -gencode arch=compute_$arch,code=sm_$arch"
  LAST=$arch
done
# PTX of the newest architecture, so later GPUs can JIT the kernels.
GENCODE="$GENCODE -gencode arch=compute_$LAST,code=compute_$LAST"
# shellcheck disable=SC2086
"$NVCC" -O3 -std=c++17 -shared -Xcompiler -fPIC $GENCODE -I "$OPS" $SOURCES -o "$OUT"
echo "built $OUT"
