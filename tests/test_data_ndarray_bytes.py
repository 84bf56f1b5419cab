"""NDArrays created from MXNet's serialization format against MXNet's own constructors."""
import threading

import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp

from gluon_sparse.data import _ndarray_bytes
from gluon_sparse.data.batchify import (_csr_through_engine, array_to_ndarray, csr_parts_to_ndarray,
                                        csr_row_range_to_ndarray, csr_to_ndarray)


def random_csr(rows, cols, density, dtype, index_dtype, seed):
    matrix = sp.random(rows, cols, density=density, format="csr", dtype=dtype, random_state=seed)
    matrix.indices = matrix.indices.astype(index_dtype)
    matrix.indptr = matrix.indptr.astype(index_dtype)
    return matrix


def assert_csr_equal(ours, matrix, dtype):
    reference = mx.nd.sparse.csr_matrix(matrix.astype(dtype))
    assert isinstance(ours, mx.nd.sparse.CSRNDArray)
    assert ours.shape == reference.shape and ours.dtype == reference.dtype
    assert ours.context == mx.cpu()
    np.testing.assert_array_equal(ours.indptr.asnumpy(), reference.indptr.asnumpy())
    np.testing.assert_array_equal(ours.indices.asnumpy(), reference.indices.asnumpy())
    np.testing.assert_array_equal(ours.data.asnumpy(), reference.data.asnumpy())
    assert ours.indices.dtype == np.int64 and ours.indptr.dtype == np.int64
    # The serialized form is byte for byte what MXNet writes for its own array.
    assert ours.__getstate__()["handle"] == reference.__getstate__()["handle"]


def test_format_matches_this_mxnet():
    assert _ndarray_bytes.fast_path_available()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("rows, cols, density", [(37, 1000, 0.01), (5, 7, 0.0), (0, 3, 0.0),
                                                 (8, 3, 1.0), (1, 10 ** 6, 1e-5)])
def test_csr_matches_mxnet_csr_matrix(dtype, index_dtype, rows, cols, density):
    matrix = random_csr(rows, cols, density, np.float64, index_dtype, seed=rows)
    result = csr_to_ndarray(matrix, dtype=dtype)
    assert_csr_equal(result, matrix, dtype)
    if rows == 0:
        return  # MXNet's legacy shape semantics read a 0 dimension as unknown: no operator runs
    # The result is an ordinary array for MXNet's operators.
    weight = np.random.default_rng(0).random((cols, 2))
    np.testing.assert_allclose(mx.nd.sparse.dot(result, mx.nd.array(weight, dtype=dtype)).asnumpy(),
                               matrix.astype(dtype) @ weight.astype(dtype), rtol=1e-5)


@pytest.mark.parametrize("start, stop", [(0, 50), (13, 14), (20, 20), (99, 100), (0, 100)])
def test_row_ranges_match_scipy_slices(start, stop):
    matrix = random_csr(100, 500, 0.02, np.float32, np.int32, seed=3)
    assert_csr_equal(csr_row_range_to_ndarray(matrix, start, stop), matrix[start:stop], np.float32)


def test_the_engine_path_gives_the_same_arrays():
    matrix = random_csr(40, 300, 0.03, np.float32, np.int32, seed=4)
    engine = _csr_through_engine(matrix.data, matrix.indices, matrix.indptr, matrix.shape,
                                 np.dtype(np.float32))
    assert_csr_equal(engine, matrix, np.float32)


def test_numpy_shape_semantics_fall_back_to_the_engine_path():
    matrix = random_csr(10, 50, 0.1, np.float32, np.int32, seed=5)
    with mx.util.np_shape(True):
        assert not _ndarray_bytes.fast_path_available()
        assert _ndarray_bytes.csr_from_parts(matrix.data, matrix.indices, matrix.indptr,
                                            matrix.shape, np.float32) is None
        result = csr_to_ndarray(matrix)
    assert_csr_equal(result, matrix, np.float32)


def test_inconsistent_parts_are_rejected():
    with pytest.raises(ValueError, match="3 row pointers for 3 rows"):
        csr_parts_to_ndarray(np.ones(2), np.array([0, 1]), np.array([0, 1, 2]), (3, 4))
    with pytest.raises(ValueError, match="1 indices for 2 values"):
        csr_parts_to_ndarray(np.ones(2), np.array([0]), np.array([0, 1, 2]), (2, 4))


@pytest.mark.parametrize("array", [np.arange(5, dtype=np.float32), np.zeros((0,)),
                                   np.arange(12, dtype=np.float64).reshape(3, 4),
                                   np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2],
                                   np.array([1, 0, 1], dtype=np.int32), np.float32(3.5)])
def test_dense_arrays_match_mx_nd_array(array):
    result = array_to_ndarray(array)
    reference = mx.nd.array(array, dtype=np.asarray(array).dtype)
    assert result.shape == reference.shape and result.dtype == reference.dtype
    np.testing.assert_array_equal(result.asnumpy(), np.asarray(array))


def test_results_own_their_memory():
    matrix = random_csr(20, 100, 0.1, np.float32, np.int64, seed=6)
    expected = matrix.copy()
    label = np.arange(20, dtype=np.float32)
    data, labels = csr_to_ndarray(matrix), array_to_ndarray(label)
    matrix.data[:] = -1
    matrix.indices[:] = 0
    label[:] = -1
    assert_csr_equal(data, expected, np.float32)
    np.testing.assert_array_equal(labels.asnumpy(), np.arange(20))


def test_arrays_can_be_created_from_several_threads():
    matrices = [random_csr(64, 1000, 0.01, np.float32, np.int32, seed=s) for s in range(4)]
    results, errors = {}, []

    def build(k):
        try:
            results[k] = [csr_to_ndarray(matrices[k]) for _ in range(50)]
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
    threads = [threading.Thread(target=build, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for k, arrays in results.items():
        for array in arrays[::10]:
            assert (array.asscipy() != matrices[k]).nnz == 0
