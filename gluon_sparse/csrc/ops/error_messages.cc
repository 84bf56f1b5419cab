/*!
 * The library's _msgSize/_msgGet: per-thread error messages, each handed to
 * MXNet once (see error_messages.h for why not lib_api's).
 *
 * MXNet 1.9.1 (src/c_api/c_api.cc, getExtensionMsgs) calls _msgSize() and then
 * _msgGet(i) for i < _msgSize() on the thread that has just called one of the
 * library's functions (parse, infer, compute), after every such call. So the
 * messages of a call are on that thread's list when MXNet asks; once the last
 * one has been read the list is emptied, and the next error starts a new one.
 * A message the library writes outside such a call (none does today) would be
 * read, and dropped, after that thread's next call.
 *
 * lib_api.cc's own definitions of the two functions are compiled under other
 * names (mxnet_lib_api.cc) so that MXNet finds these.
 */
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "error_messages.h"

namespace gluon_sparse {
namespace {

struct ThreadMessages {
  std::vector<std::unique_ptr<std::ostringstream>> pending;
  std::string read;  // what the last _msgGet handed out; lives until the next one
};

ThreadMessages& thread_messages() {
  thread_local ThreadMessages messages;
  return messages;
}

}  // namespace

std::ostream& error_message(const char* file, int line) {
  auto& pending = thread_messages().pending;
  pending.push_back(std::make_unique<std::ostringstream>());
  *pending.back() << file << "[" << line << "]: ";
  return *pending.back();
}

std::string dtype_name(int code) {
  // mshadow's type flags (mshadow/base.h), as MXNet's _DTYPE_MX_TO_NP numbers them.
  static const char* const kNames[] = {"float32", "float64", "float16", "uint8", "int32",
                                       "int8",    "int64",   "bool",    "int16", "uint16",
                                       "uint32",  "uint64",  "bfloat16"};
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return kNames[code];
  }
  return "dtype code " + std::to_string(code);
}

}  // namespace gluon_sparse

MX_INT_RET _msgSize() {
  return static_cast<int>(gluon_sparse::thread_messages().pending.size());
}

MX_VOID_RET _msgGet(int idx, const char** msg) {
  auto& messages = gluon_sparse::thread_messages();
  const int count = static_cast<int>(messages.pending.size());
  messages.read = (idx >= 0 && idx < count) ? messages.pending[idx]->str() : std::string();
  if (idx == count - 1) messages.pending.clear();  // all of this call's messages are read
  *msg = messages.read.c_str();
}
