"""Streaming LibSVM reader for files larger than memory."""
import bz2
import concurrent.futures
import gzip
import itertools
import logging

import numpy as np
import scipy.sparse as sp

from .batchify import array_to_ndarray, check_batch_size, csr_row_range_to_ndarray
from .libsvm import (DECOMPRESSION_ERRORS, _as_path_list, _check_zero_based, check_not_compressed,
                     decompression_error)
from ._libsvm_parser import newlines_before, parse_libsvm_bytes, row_line_number
from .prefetch import Prefetcher

__all__ = ["LibSVMStream"]

logger = logging.getLogger(__name__)


def _open(path):
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith(".bz2"):
        return bz2.open(path, "rb")
    f = open(path, "rb")
    try:
        check_not_compressed(path, f.peek(6))
    except ValueError:
        f.close()
        raise
    return f


class LibSVMStream:
    """Batches from LibSVM files read chunk by chunk, with bounded memory.

    Each pass reads ``chunk_bytes`` at a time, parses the complete lines with
    the native parser (on several threads) and emits CSR batches. With
    ``shuffle_buffer > 0`` the rows go through a pool that is shuffled before
    batches are taken from it and that keeps ``shuffle_buffer`` rows back to
    mix with the next chunk: rows are shuffled within a window of about
    ``shuffle_buffer`` rows plus one chunk, not across the whole file.

    With ``num_parts > 1`` each distributed worker gets an exactly even,
    line-strided share, the same rows as :class:`SparseDataLoader` gives it
    over the whole file: worker ``k`` of ``P`` takes data rows ``k, k + P,
    k + 2P, ...`` (counted across all files, comment and blank lines
    skipped), truncated to ``N // P`` rows for ``N`` rows in all, so every
    worker has the same number of rows and batches, which synchronous
    training needs. The price of that evenness: every worker reads and parses
    the whole input (byte-range splits, as ``mx.io.LibSVMIter`` makes, would
    read ``1/P`` each but give workers different row counts, and cannot split
    compressed files). To read less per worker, give each worker its own
    files instead.

    A compressed file that ends early or is damaged raises a ValueError
    naming the file, the line and the bytes of text read before the failure
    (the batches before it have been yielded).

    Memory is bounded independently of the file size: two text buffers of
    ``chunk_bytes`` (each grown to the longest line if one is longer), the
    parsed rows of two chunks (one being batched while the next is parsed in
    a helper thread), ``max(shuffle_buffer, batch_size)`` carried-over rows
    (twice while they are shuffled), and ``prefetch + 3`` batches (buffered,
    held by the training loop or freed next by the prefetch thread, being built).

    Parameters
    ----------
    path_or_paths : str, os.PathLike or list of them
        Files read in order each epoch; ``.gz`` / ``.bz2`` are decompressed on the fly.
    batch_size : int
        Rows per batch.
    num_features : int
        Width of the batches (a stream cannot infer it); an index beyond it is an error.
    chunk_bytes : int
        Bytes of text read and parsed at a time.
    shuffle_buffer : int
        Rows kept for shuffling; 0 keeps file order.
    zero_based : bool
        Whether indices start at 0. Default False, the LIBSVM convention (index
        0 is then an error). ``'auto'`` needs the whole file and is not accepted.
    dtype : str
        float32 or float64.
    last_batch : {'keep', 'discard'}
        Yield or drop the final incomplete batch of an epoch.
    seed : int, optional
        Seed of the shuffles; epoch ``e`` uses ``(seed, e)``.
    prefetch : int
        Batches read and built ahead in a background thread (0: none). As in
        :class:`SparseDataLoader`, a loop that does little but wait for
        batches gets them built in its own thread for the rest of the epoch;
        the next chunk is parsed in a helper thread either way.
    num_parts : int
        Number of distributed workers sharing the files.
    part_index : int
        This worker, in ``[0, num_parts)``.

    Examples
    --------
    >>> stream = LibSVMStream("train.libsvm", batch_size=256, num_features=10**6,
    ...                       shuffle_buffer=100000, seed=0)  # doctest: +SKIP
    >>> for data, label in stream:  # doctest: +SKIP
    ...     pass
    """

    def __init__(self, path_or_paths, batch_size, num_features, chunk_bytes=16 << 20,
                 shuffle_buffer=0, zero_based=False, dtype="float32", last_batch="keep",
                 seed=None, prefetch=2, num_parts=1, part_index=0):
        if isinstance(zero_based, str) and zero_based == "auto":
            raise ValueError("LibSVMStream needs zero_based=True or False (got 'auto'): 'auto' "
                             "would need to read the whole file first")
        zero_based = _check_zero_based(zero_based, allow_auto=False)
        if batch_size < 1 or num_features < 1 or chunk_bytes < 1 or shuffle_buffer < 0:
            raise ValueError("need batch_size >= 1, num_features >= 1, chunk_bytes >= 1 and "
                             "shuffle_buffer >= 0; got %d, %d, %d, %d"
                             % (batch_size, num_features, chunk_bytes, shuffle_buffer))
        if num_parts < 1 or not 0 <= part_index < num_parts:
            raise ValueError("need num_parts >= 1 and 0 <= part_index < num_parts, got num_parts=%d, "
                             "part_index=%d" % (num_parts, part_index))
        if last_batch not in ("keep", "discard"):
            raise ValueError("last_batch must be 'keep' or 'discard', got %r" % (last_batch,))
        check_batch_size(batch_size, num_features)
        self.paths = _as_path_list(path_or_paths)
        self.batch_size = int(batch_size)
        self.num_features = int(num_features)
        self.chunk_bytes = int(chunk_bytes)
        self.shuffle_buffer = int(shuffle_buffer)
        self.zero_based = zero_based
        self.dtype = np.dtype(dtype)
        self.last_batch = last_batch
        self.seed = int(np.random.SeedSequence().entropy % 2 ** 63) if seed is None else int(seed)
        self.prefetch = prefetch
        self.num_parts = int(num_parts)
        self.part_index = int(part_index)
        self.epoch = 0

    def _chunks(self, path):
        """Yield (matrix, label) of each chunk of complete lines in ``path``.

        Each chunk is parsed in a helper thread while the caller batches the
        previous one (the native parser runs without the GIL).
        """
        with concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="gluon-sparse-parse") as pool:
            pending = None
            try:
                for text, lines_before in self._texts(path):
                    parsed = pool.submit(self._parse, text, path, lines_before)
                    if pending is not None:
                        yield pending.result()
                    pending = parsed
                if pending is not None:
                    yield pending.result()
            finally:
                if pending is not None:
                    pending.cancel()

    def _texts(self, path):
        """Yield ``(text, lines_before)`` for each chunk of complete lines in ``path``.

        Two buffers take turns: the file is read into one, after the
        incomplete line the other ended with, while the other's text is
        still being parsed. The caller must be done with a text before asking
        for the next but one. A buffer doubles when a single line is longer.
        """
        buffers = [bytearray(self.chunk_bytes), bytearray(self.chunk_bytes)]
        previous, previous_cut, previous_end = None, 0, 0
        lines_before = 0
        offset = 0  # bytes of text before the current buffer
        with _open(path) as f:
            for turn in itertools.count():
                buffer = buffers[turn % 2]
                filled = previous_end - previous_cut
                if filled > len(buffer):
                    buffer.extend(bytes(filled - len(buffer)))
                if filled:
                    buffer[:filled] = previous[previous_cut:previous_end]
                while True:
                    if filled == len(buffer):
                        cut = buffer.rfind(b"\n", 0, filled) + 1
                        if cut:
                            break
                        buffer.extend(bytes(len(buffer)))  # one line longer than the buffer
                    try:
                        # readinto1: one read of the decompressor at a time. On a
                        # damaged .gz / .bz2, readinto would drop what it had already
                        # decompressed in this call, and the error would name the
                        # start of the chunk instead of the damage.
                        with memoryview(buffer) as view:
                            read = f.readinto1(view[filled:])
                    except DECOMPRESSION_ERRORS as err:
                        line = lines_before + buffer.count(b"\n", 0, filled) + 1
                        raise decompression_error(path, err, offset + filled, line) from err
                    if not read:
                        if filled:
                            yield memoryview(buffer)[:filled], lines_before
                        return
                    filled += read
                text = memoryview(buffer)[:cut]
                yield text, lines_before
                lines_before += newlines_before(text, cut)
                offset += cut
                previous, previous_cut, previous_end = buffer, cut, filled

    def _parse(self, text, path, lines_before):
        chunk = parse_libsvm_bytes(text, dtype=self.dtype, reject_zero=not self.zero_based,
                                   source=path, line_base=lines_before)
        shift = 0 if self.zero_based else 1
        if chunk.indices.size:
            if shift:
                chunk.indices -= chunk.indices.dtype.type(shift)
            if chunk.max_index - shift >= self.num_features:
                self._raise_out_of_range(text, chunk, path, lines_before, shift)
        index_dtype = chunk.indices.dtype
        if self.num_features > np.iinfo(np.int32).max and index_dtype != np.int64:
            chunk.indices, chunk.indptr = chunk.indices.astype(np.int64), chunk.indptr.astype(np.int64)
        matrix = sp.csr_matrix((chunk.values, chunk.indices, chunk.indptr),
                               shape=(chunk.num_rows, self.num_features), copy=False)
        matrix.has_sorted_indices = True
        logger.debug("%s: parsed %d rows after line %d", path, chunk.num_rows, lines_before)
        return matrix, chunk.labels

    def _raise_out_of_range(self, text, chunk, path, lines_before, shift):
        row, index = chunk.first_index_at_least(self.num_features)
        raise ValueError("%s, line %d: feature index %d is out of range for num_features=%d"
                         % (path, row_line_number(text, row, lines_before), index + shift,
                            self.num_features))

    def _share(self):
        """Yield ``(matrix, label)`` pieces of this worker's rows, in file order."""
        parts = self.num_parts
        if parts == 1:
            for path in self.paths:
                yield from self._chunks(path)
            return
        seen = 0  # data rows before the current chunk, across files
        taken = 0
        held = None  # this worker's latest row, kept until the total is known
        for path in self.paths:
            for matrix, label in self._chunks(path):
                first = (self.part_index - seen) % parts
                seen += matrix.shape[0]
                if first >= matrix.shape[0]:
                    continue
                matrix, label = matrix[first::parts], label[first::parts]
                taken += matrix.shape[0]
                if held is not None:
                    yield held
                held = matrix[-1:], label[-1:]
                if matrix.shape[0] > 1:
                    yield matrix[:-1], label[:-1]
        # Worker k was dealt ceil((N - k) / P) rows; the first N % P workers
        # have one more than N // P, and it is the last one, still held.
        if held is not None and taken <= seen // parts:
            yield held

    def _batches(self, epoch):
        """Yield ``(matrix, labels, start, stop)``: batch rows ``[start, stop)`` of ``matrix``."""
        if self.shuffle_buffer:
            yield from self._shuffled_batches(epoch)
            return
        size = self.batch_size
        carry, carry_label = None, None  # rows short of a batch, from the previous pieces
        for matrix, label in self._share():
            start = 0
            if carry is not None:
                # One batch joins the carried rows to the head of this piece;
                # the rest of the piece is batched in place, without a copy.
                start = min(size - carry.shape[0], matrix.shape[0])
                carry = sp.vstack([carry, matrix[:start]], format="csr")
                carry_label = np.concatenate([carry_label, label[:start]])
                if carry.shape[0] < size:
                    continue
                yield carry, carry_label, 0, size
            stop = start + (matrix.shape[0] - start) // size * size
            for first in range(start, stop, size):
                yield matrix, label, first, first + size
            carry, carry_label = (matrix[stop:], label[stop:]) if stop < matrix.shape[0] else (None, None)
        if carry is not None and self.last_batch == "keep":
            yield carry, carry_label, 0, carry.shape[0]

    def _shuffled_batches(self, epoch):
        rng = np.random.default_rng([self.seed, epoch])
        pool = sp.csr_matrix((0, self.num_features), dtype=self.dtype)
        pool_label = np.zeros(0, dtype=np.float64)
        for matrix, label in self._share():
            if pool.shape[0]:
                matrix = sp.vstack([pool, matrix], format="csr")
                label = np.concatenate([pool_label, label])
            pool, pool_label = matrix, label
            del matrix, label
            order = rng.permutation(pool.shape[0])
            pool, pool_label = pool[order], pool_label[order]
            # Batches are contiguous row ranges of the pool: each row is
            # copied once, and shuffle_buffer rows stay to mix with the next chunk.
            ready = max(pool.shape[0] - self.shuffle_buffer, 0)
            ready -= ready % self.batch_size
            for start in range(0, ready, self.batch_size):
                yield pool, pool_label, start, start + self.batch_size
            pool, pool_label = pool[ready:], pool_label[ready:]
        order = rng.permutation(pool.shape[0])
        pool, pool_label = pool[order], pool_label[order]
        rows = pool.shape[0]
        end = rows if self.last_batch == "keep" else rows - rows % self.batch_size
        for start in range(0, end, self.batch_size):
            yield pool, pool_label, start, min(start + self.batch_size, end)

    def _ndarray_batches(self, epoch):
        for matrix, label, start, stop in self._batches(epoch):
            yield (csr_row_range_to_ndarray(matrix, start, stop, self.dtype),
                   array_to_ndarray(label[start:stop].astype(self.dtype, copy=False)))

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        if not self.prefetch:
            yield from self._ndarray_batches(epoch)
            return
        with Prefetcher(self._ndarray_batches(epoch), depth=self.prefetch, adaptive=True,
                        name="gluon-sparse-stream") as batches:
            yield from batches
