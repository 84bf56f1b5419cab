/*!
 * Clearing lib_api's error messages (a work-around for MXNet 1.9.1's lib_api.cc).
 *
 * Every MX_ERROR_MSG an operator writes is appended to the singleton
 * MXerrorMsgs and never removed, and lib_api's _msgGet hands MXNet a fresh
 * `new std::string` copy of a message each time it is asked, never freed. Once
 * one error has been reported, every later call of this library's operators
 * leaks copies of all the messages so far (measured: ~1 KB a call after one
 * error, ~6 KB after four). gluon_sparse_clear_error_messages() empties the
 * list; call it only when no operator of this library can be running (after
 * mx.nd.waitall()), since MXNet reads the list right after a failing call.
 *
 * MXerrorMsgs keeps its list private and has no method to clear it: the
 * pointer to that member is taken through an explicit template instantiation,
 * which C++ exempts from access checking ([temp.spec] / [temp.explicit]).
 */
#include <sstream>
#include <vector>

#include "mxnet/lib_api.h"

namespace gluon_sparse {
namespace {

using Messages = std::vector<std::stringstream*> mxnet::ext::MXerrorMsgs::*;

struct MessagesMember {
  friend Messages messages_member(MessagesMember);
};

template <Messages kMember>
struct ExposeMessages {
  friend Messages messages_member(MessagesMember) { return kMember; }
};

template struct ExposeMessages<&mxnet::ext::MXerrorMsgs::messages>;

}  // namespace
}  // namespace gluon_sparse

/*! \brief Drop every error message lib_api holds; returns how many there were. */
extern "C" int gluon_sparse_clear_error_messages() {
  using gluon_sparse::MessagesMember;
  auto& messages =
      mxnet::ext::MXerrorMsgs::get()->*messages_member(MessagesMember());
  const int count = static_cast<int>(messages.size());
  for (std::stringstream* message : messages) delete message;
  messages.clear();
  return count;
}
