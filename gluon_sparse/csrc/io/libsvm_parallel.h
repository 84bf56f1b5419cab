// Parallel driver of the LibSVM parser: cuts a buffer into one byte range
// per thread at line boundaries, parses the ranges concurrently (libsvm_rows.h)
// and concatenates the per-range arrays into the caller's arrays.
//
// Threads are used by the amount of work: a buffer below kParseGrainBytes is
// parsed on the calling thread alone, and a larger one by at most
// length / kParseGrainBytes threads, so small inputs (a chunk of a stream, a
// test file) pay no thread start-up.
#ifndef GLUON_SPARSE_CSRC_IO_LIBSVM_PARALLEL_H_
#define GLUON_SPARSE_CSRC_IO_LIBSVM_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "libsvm_rows.h"

namespace gluon_sparse {
namespace io {

// Bytes of text below which one more thread does not pay for itself.
// Measured (benchmarks/RESULTS.md, data pipeline): one thread parses ~350 MB/s,
// starting and joining a second costs ~40 us, and a second thread made the
// parse slower up to 128 KiB (1.62x the serial time at 16 KiB, 1.06x at
// 128 KiB) and faster from 256 KiB (0.89x; 0.58x at 1 MiB).
constexpr int64_t kParseGrainBytes = int64_t{256} << 10;
constexpr int kMaxParseThreads = 256;

// Threads used for `length` bytes when the caller allows `requested`.
int ParseTeamSize(int64_t length, int32_t requested);

struct HandleBase {
  virtual ~HandleBase() = default;
  int32_t flags = 0;
  ErrorInfo error;
  int64_t num_rows = 0, nnz = 0, num_labels = 0;
  int64_t min_index = kNoIndex, max_index = -1;
};

template <typename Real>
struct Handle : HandleBase {
  std::vector<Chunk<Real>> chunks;
};

// Parses buf[0, length); nullptr when not even the handle could be allocated.
HandleBase* ParseBuffer(const char* buf, int64_t length, int32_t flags, int32_t num_threads);

// Copies a parsed handle into caller-allocated arrays (see gluon_sparse_libsvm_copy).
template <typename Real>
int32_t CopyParsed(const Handle<Real>& h, Real* values, void* indices, void* indptr,
                   int32_t index_bytes, int64_t index_shift, int64_t indptr_base, double* labels,
                   int64_t* label_ptr);

}  // namespace io
}  // namespace gluon_sparse

#endif  // GLUON_SPARSE_CSRC_IO_LIBSVM_PARALLEL_H_
