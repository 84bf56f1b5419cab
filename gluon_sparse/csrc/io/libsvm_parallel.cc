// Parallel driver of the LibSVM parser (see libsvm_parallel.h).
#include "libsvm_parallel.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>

namespace gluon_sparse {
namespace io {
namespace {

// Runs fn(i) for i in [0, n) on n threads (the calling thread takes i = 0).
// Falls back to running inline when a thread cannot be started.
template <typename Fn>
void RunParallel(int n, Fn fn) {
  std::vector<std::thread> threads;
  int started_until = 1;
  try {
    for (int i = 1; i < n; ++i) {
      threads.emplace_back(fn, i);
      started_until = i + 1;
    }
  } catch (const std::system_error&) {
  } catch (const std::bad_alloc&) {
  }
  fn(0);
  for (int i = started_until; i < n; ++i) fn(i);
  for (auto& thread : threads) thread.join();
}

template <typename Real>
HandleBase* ParseTyped(const char* buf, int64_t length, int32_t flags, int32_t num_threads) {
  auto* handle = new (std::nothrow) Handle<Real>();
  if (!handle) return nullptr;
  handle->flags = flags;
  try {
    const int n = ParseTeamSize(length, num_threads);
    handle->chunks.resize(n);
    std::vector<int64_t> bounds(n + 1);
    bounds[0] = 0;
    bounds[n] = length;
    for (int i = 1; i < n; ++i) {
      // Each range starts just after a newline so no line is split.
      int64_t b = std::max(bounds[i - 1], length / n * i);
      const char* nl = b > 0 ? static_cast<const char*>(
                                   std::memchr(buf + b - 1, '\n', length - (b - 1)))
                             : buf - 1;
      bounds[i] = nl ? (nl - buf) + 1 : length;
    }
    RunParallel(n, [&](int i) {
      Chunk<Real>& chunk = handle->chunks[i];
      try {
        ParseRange(buf, bounds[i], bounds[i + 1], flags, &chunk);
      } catch (const std::bad_alloc&) {
        chunk.error.code = GS_LIBSVM_OUT_OF_MEMORY;
        chunk.error.token_offset = bounds[i];
      }
    });
  } catch (const std::bad_alloc&) {
    handle->error.code = GS_LIBSVM_OUT_OF_MEMORY;
    return handle;
  }
  for (const auto& chunk : handle->chunks) {
    if (chunk.error.code != GS_LIBSVM_OK) {
      handle->error = chunk.error;  // chunks are in byte order: the first is the earliest
      return handle;
    }
    handle->num_rows += static_cast<int64_t>(chunk.row_end.size());
    handle->nnz += static_cast<int64_t>(chunk.indices.size());
    handle->num_labels += static_cast<int64_t>(chunk.labels.size());
    handle->min_index = std::min(handle->min_index, chunk.min_index);
    handle->max_index = std::max(handle->max_index, chunk.max_index);
  }
  return handle;
}

template <typename Int>
void CopyIndices(const std::vector<int64_t>& src, int64_t shift, Int* dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<Int>(src[i] - shift);
}

template <typename Int>
void CopyIndptr(const std::vector<int64_t>& row_end, int64_t base, Int* dst) {
  for (size_t i = 0; i < row_end.size(); ++i) dst[i] = static_cast<Int>(row_end[i] + base);
}

}  // namespace

int ParseTeamSize(int64_t length, int32_t requested) {
  const int64_t by_work = std::max<int64_t>(1, length / kParseGrainBytes);
  const int64_t allowed = std::clamp<int64_t>(requested, 1, kMaxParseThreads);
  return static_cast<int>(std::min(by_work, allowed));
}

HandleBase* ParseBuffer(const char* buf, int64_t length, int32_t flags, int32_t num_threads) {
  if (flags & GS_LIBSVM_FLOAT32) return ParseTyped<float>(buf, length, flags, num_threads);
  return ParseTyped<double>(buf, length, flags, num_threads);
}

template <typename Real>
int32_t CopyParsed(const Handle<Real>& h, Real* values, void* indices, void* indptr,
                   int32_t index_bytes, int64_t index_shift, int64_t indptr_base, double* labels,
                   int64_t* label_ptr) {
  const int n = static_cast<int>(h.chunks.size());
  std::vector<int64_t> row_at(n + 1, 0), nnz_at(n + 1, 0), label_at(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    row_at[i + 1] = row_at[i] + static_cast<int64_t>(h.chunks[i].row_end.size());
    nnz_at[i + 1] = nnz_at[i] + static_cast<int64_t>(h.chunks[i].indices.size());
    label_at[i + 1] = label_at[i] + static_cast<int64_t>(h.chunks[i].labels.size());
  }
  const bool multilabel = h.flags & GS_LIBSVM_MULTILABEL;
  // indptr[0] is written here; each chunk writes its rows' ends after it.
  if (index_bytes == 4) static_cast<int32_t*>(indptr)[0] = static_cast<int32_t>(indptr_base);
  else static_cast<int64_t*>(indptr)[0] = indptr_base;
  if (multilabel) label_ptr[0] = 0;
  RunParallel(n, [&](int i) {
    const Chunk<Real>& c = h.chunks[i];
    std::copy(c.values.begin(), c.values.end(), values + nnz_at[i]);
    std::copy(c.labels.begin(), c.labels.end(), labels + label_at[i]);
    if (index_bytes == 4) {
      CopyIndices(c.indices, index_shift, static_cast<int32_t*>(indices) + nnz_at[i]);
      CopyIndptr(c.row_end, indptr_base + nnz_at[i], static_cast<int32_t*>(indptr) + 1 + row_at[i]);
    } else {
      CopyIndices(c.indices, index_shift, static_cast<int64_t*>(indices) + nnz_at[i]);
      CopyIndptr(c.row_end, indptr_base + nnz_at[i], static_cast<int64_t*>(indptr) + 1 + row_at[i]);
    }
    if (multilabel) {
      for (size_t r = 0; r < c.label_end.size(); ++r)
        label_ptr[1 + row_at[i] + r] = c.label_end[r] + label_at[i];
    }
  });
  return GS_LIBSVM_OK;
}

template int32_t CopyParsed<float>(const Handle<float>&, float*, void*, void*, int32_t, int64_t,
                                   int64_t, double*, int64_t*);
template int32_t CopyParsed<double>(const Handle<double>&, double*, void*, void*, int32_t,
                                    int64_t, int64_t, double*, int64_t*);

}  // namespace io
}  // namespace gluon_sparse
