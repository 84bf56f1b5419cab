/*!
 * MXNet's lib_api.cc (the extension interface every operator library compiles
 * in), with its _msgSize/_msgGet renamed: the library exports its own
 * (error_messages.cc), which do not leak and keep each thread's messages apart.
 * Found through the include path setup.py gives: <mxnet>/src.
 */
#define _msgSize gluon_sparse_lib_api_msgSize_unused
#define _msgGet gluon_sparse_lib_api_msgGet_unused
#include "lib_api.cc"
