/*!
 * Entry point of gluon-sparse's MXNet operator library.
 *
 * MXNet calls `initialize` once from `mx.library.load`, passing its own
 * version (major*10000 + minor*100 + patch). The library is compiled against
 * the installed MXNet's lib_api.h, so any other version means the wheel was
 * upgraded or swapped underneath us: refuse to load rather than risk a
 * mismatched ABI.
 * The operators themselves register in their own source files.
 */
#include "error_messages.h"
#include "mxnet/lib_api.h"

using namespace mxnet::ext;

#ifndef GLUON_SPARSE_MXNET_VERSION_CODE
#error "compile with -DGLUON_SPARSE_MXNET_VERSION_CODE (setup.py does)"
#endif

MXReturnValue initialize(int version) {
  if (version != GLUON_SPARSE_MXNET_VERSION_CODE) {
    GS_ERROR_MSG << "gluon-sparse's operator library was compiled against MXNet "
                 << GLUON_SPARSE_MXNET_VERSION << " (" << GLUON_SPARSE_MXNET_VERSION_CODE
                 << ") but the running MXNet is version " << version
                 << ". Reinstall gluon-sparse against this MXNet: "
                 << "pip install --force-reinstall --no-cache-dir gluon-sparse";
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

/*! \brief The MXNet version whose lib_api.h this library was compiled against. */
extern "C" const char* gluon_sparse_build_mxnet_version() {
#ifdef GLUON_SPARSE_MXNET_VERSION
  return GLUON_SPARSE_MXNET_VERSION;
#else
  return "unknown";
#endif
}

/*! \brief 1 when the CUDA kernels were compiled in, else 0. */
extern "C" int gluon_sparse_built_with_cuda() {
#ifdef GLUON_SPARSE_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}
