/*!
 * Error messages of this library's operators, as MXNet reads them.
 *
 * An operator that fails writes its reason with GS_ERROR_MSG (used as a
 * stream: `GS_ERROR_MSG << "what went wrong"`) and returns MX_FAIL. MXNet
 * asks for the messages (the library's exported _msgSize/_msgGet) on the
 * thread that made the call, right after every call, failed or not.
 *
 * Not lib_api's MX_ERROR_MSG: MXNet 1.9.1's lib_api keeps every message in one
 * list shared by all threads, never empties it, and leaks a copy of each
 * message every time MXNet asks for it, so after one error every later call of
 * this library's operators leaked, and every later error also repeated all the
 * earlier ones. Here each thread keeps its own messages until MXNet has read
 * them (error_messages.cc).
 */
#ifndef GLUON_SPARSE_OPS_ERROR_MESSAGES_H_
#define GLUON_SPARSE_OPS_ERROR_MESSAGES_H_

#include <ostream>
#include <string>

#include "mxnet/lib_api.h"

namespace gluon_sparse {

/*! \brief A new message on this thread, opened with "file[line]: " as lib_api does. */
std::ostream& error_message(const char* file, int line);

/*! \brief The name NumPy and MXNet give dtype code ``code`` (mshadow's type flag):
 *         "float32", "float64", "int64", ...; "dtype code N" for one it does not know. */
std::string dtype_name(int code);

}  // namespace gluon_sparse

#define GS_ERROR_MSG ::gluon_sparse::error_message(__FILE__, __LINE__)

// lib_api's macro would put a message where MXNet no longer looks.
#undef MX_ERROR_MSG

#endif  // GLUON_SPARSE_OPS_ERROR_MESSAGES_H_
