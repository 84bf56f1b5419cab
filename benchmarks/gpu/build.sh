#!/bin/sh
# Build build/libadam_harness.so from the harness entry points and the operator
# library's own CUDA kernel sources (gluon_sparse/csrc/ops/adam_kernels.cu for
# the eager update, adam_deferred_kernels.cu for deferred Adam).
#   ARCHS="75 80 90" NVCC=nvcc benchmarks/gpu/build.sh [output.so]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OPS="$HERE/../../gluon_sparse/csrc/ops"
NVCC=${NVCC:-nvcc}
ARCHS=${ARCHS:-"75 80 90"}
OUT=${1:-"$HERE/build/libadam_harness.so"}
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
"$NVCC" -O3 -std=c++17 -shared -Xcompiler -fPIC $GENCODE -I "$OPS" \
  "$HERE/adam_harness.cu" "$HERE/adam_deferred_harness.cu" \
  "$OPS/adam_kernels.cu" "$OPS/adam_deferred_kernels.cu" -o "$OUT"
echo "built $OUT"
