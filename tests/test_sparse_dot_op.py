"""The operator library's gluon_sparse_dot against MXNet's sparse.dot, scipy and NumPy."""
import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse import _native
from gluon_sparse.nn import FactorizationMachine, FullyConnectedSparse

_native.load_ops()


def random_csr(rows, cols, nnz_per_row, seed, dtype="float32", duplicates_across_rows=True):
    """A CSR batch with ``nnz_per_row`` sorted, distinct columns per row."""
    rng = np.random.RandomState(seed)
    pool = rng.choice(cols, size=min(cols, 3 * nnz_per_row), replace=False)
    indices = []
    for _ in range(rows):
        source = pool if duplicates_across_rows else np.arange(cols)
        indices.append(np.sort(rng.choice(source, size=nnz_per_row, replace=False)))
    indices = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    data = rng.randn(len(indices)).astype(dtype)
    indptr = np.arange(0, rows * nnz_per_row + 1, nnz_per_row)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))


def to_mx(matrix):
    return mx.nd.sparse.csr_matrix((matrix.data, matrix.indices.astype(np.int64),
                                    matrix.indptr.astype(np.int64)), shape=matrix.shape,
                                   dtype=matrix.dtype)


def forward_backward(op, x, weight, head, **kwargs):
    weight = weight.copy()
    # Not attach_grad(stype=...): MXNet 1.9 makes that gradient float32 whatever the weight's dtype.
    grad = mx.nd.sparse.zeros("row_sparse", weight.shape, dtype=weight.dtype)
    autograd.mark_variables([weight], [grad])
    with autograd.record():
        out = op(x, weight, **kwargs)
    out.backward(head)
    return out, weight.grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows,cols,nnz,units", [(10, 20000, 10, 128), (7, 50, 6, 3),
                                                 (1, 20, 1, 1), (33, 1000, 25, 17)])
def test_forward_and_gradient_equal_mxnet_sparse_dot(dtype, rows, cols, nnz, units):
    scipy_x = random_csr(rows, cols, nnz, seed=rows + cols, dtype=dtype)
    x = to_mx(scipy_x)
    rng = np.random.RandomState(1)
    weight = mx.nd.array(rng.randn(cols, units), dtype=dtype)
    head = mx.nd.array(rng.randn(rows, units), dtype=dtype)

    out, grad = forward_backward(mx.nd.gluon_sparse_dot, x, weight, head)
    ref_out, ref_grad = forward_backward(mx.nd.sparse.dot, x, weight, head)

    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.asnumpy(), ref_out.asnumpy(), **tol)
    np.testing.assert_allclose(out.asnumpy(), scipy_x @ weight.asnumpy(), **tol)
    assert grad.stype == "row_sparse" and grad.dtype == np.dtype(dtype)
    # Same rows, in the same (ascending) order, and the same values.
    np.testing.assert_array_equal(grad.indices.asnumpy(), ref_grad.indices.asnumpy())
    np.testing.assert_array_equal(grad.indices.asnumpy(), np.unique(scipy_x.indices))
    np.testing.assert_allclose(grad.data.asnumpy(), ref_grad.data.asnumpy(), **tol)
    np.testing.assert_allclose(grad.tostype("default").asnumpy(),
                               scipy_x.T @ head.asnumpy(), **tol)


def test_squared_product_and_gradient_match_numpy():
    scipy_x = random_csr(6, 40, 5, seed=3, dtype="float64")
    rng = np.random.RandomState(2)
    weight = mx.nd.array(rng.randn(40, 4), dtype="float64")
    head = mx.nd.array(rng.randn(6, 4), dtype="float64")
    out, grad = forward_backward(mx.nd.gluon_sparse_dot, to_mx(scipy_x), weight, head, squared=True)
    x, w, g = scipy_x.toarray(), weight.asnumpy(), head.asnumpy()
    np.testing.assert_allclose(out.asnumpy(), (x ** 2) @ (w ** 2), rtol=1e-12)
    np.testing.assert_allclose(grad.tostype("default").asnumpy(), 2 * w * ((x ** 2).T @ g),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(grad.indices.asnumpy(), np.unique(scipy_x.indices))


def test_dense_data_gives_the_same_result_as_csr():
    scipy_x = random_csr(5, 30, 4, seed=4)
    weight = mx.nd.array(np.random.RandomState(5).randn(30, 3))
    head = mx.nd.ones((5, 3))
    out_csr, grad_csr = forward_backward(mx.nd.gluon_sparse_dot, to_mx(scipy_x), weight, head)
    out_dense, grad_dense = forward_backward(mx.nd.gluon_sparse_dot,
                                             mx.nd.array(scipy_x.toarray()), weight, head)
    np.testing.assert_allclose(out_dense.asnumpy(), out_csr.asnumpy(), rtol=1e-6)
    np.testing.assert_array_equal(grad_dense.indices.asnumpy(), grad_csr.indices.asnumpy())
    np.testing.assert_allclose(grad_dense.data.asnumpy(), grad_csr.data.asnumpy(), rtol=1e-6)


def test_empty_rows_and_explicit_zeros():
    # Row 1 is empty; the explicit 0.0 in row 2 still yields a (zero) gradient row, as in MXNet.
    x = mx.nd.sparse.csr_matrix((np.array([1.0, 2.0, 0.0], "float32"), np.array([3, 7, 5]),
                                 np.array([0, 2, 2, 3])), shape=(3, 10))
    weight = mx.nd.array(np.arange(20, dtype="float32").reshape(10, 2))
    head = mx.nd.ones((3, 2))
    out, grad = forward_backward(mx.nd.gluon_sparse_dot, x, weight, head)
    ref_out, ref_grad = forward_backward(mx.nd.sparse.dot, x, weight, head)
    np.testing.assert_allclose(out.asnumpy(), ref_out.asnumpy())
    np.testing.assert_array_equal(grad.indices.asnumpy(), ref_grad.indices.asnumpy())
    np.testing.assert_allclose(grad.data.asnumpy(), ref_grad.data.asnumpy())


def test_symbolic_graph_and_shape_inference():
    data, weight = mx.sym.var("data", stype="csr"), mx.sym.var("weight")
    out = mx.sym.gluon_sparse_dot(data, weight)
    _, out_shapes, _ = out.infer_shape(data=(4, 9), weight=(9, 5))
    assert out_shapes == [(4, 5)]
    # in_units of a deferred weight comes from the data.
    arg_shapes, _, _ = out.infer_shape_partial(data=(4, 9), weight=(0, 5))
    assert arg_shapes[1] == (9, 5)
    with pytest.raises(mx.MXNetError, match="9 columns but weight has 8 rows"):
        out.infer_shape(data=(4, 9), weight=(8, 5))


@pytest.mark.parametrize("bad,message", [
    ((np.array([1.0, 2.0], "float32"), np.array([0, 10]), np.array([0, 1, 2])),
     r"column index 10 \(row 1, entry 1\) is outside \[0, 10\)"),
    ((np.array([1.0, 2.0], "float32"), np.array([0, -1]), np.array([0, 1, 2])),
     r"column index -1 \(row 1, entry 1\) is outside"),
])
def test_out_of_range_columns_are_an_error_naming_the_entry(bad, message):
    x = mx.nd.sparse.csr_matrix(bad, shape=(2, 10))
    weight = mx.nd.ones((10, 3))
    with pytest.raises(mx.MXNetError, match=message):
        mx.nd.gluon_sparse_dot(x, weight).asnumpy()


def test_bad_attribute_and_dtype_are_errors():
    x = to_mx(random_csr(2, 10, 2, seed=0))
    with pytest.raises(mx.MXNetError, match="squared='maybe' is not a boolean"):
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 2)), squared="maybe").asnumpy()
    with pytest.raises(mx.MXNetError, match="same dtype"):
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 2), dtype="float64")).asnumpy()


# --------------------------------------------------------------------------- through the blocks


def reference_block_gradients(block, x, head):
    with autograd.record():
        out = block(x)
    out.backward(head)
    return {name: p.grad() for name, p in block.collect_params().items()}


class MXNetSparseDotLayer(gluon.HybridBlock):
    """FullyConnectedSparse's math written with MXNet's own sparse.dot (the reference), then
    MXNet's broadcast_add; ``product(F, x, weight)`` replaces the sparse.dot."""

    def __init__(self, units, in_units, product=None, **kwargs):
        super().__init__(**kwargs)
        self._product = product or (lambda F, x, weight: F.sparse.dot(x, weight))
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(in_units, units),
                                          grad_stype="row_sparse")
            self.bias = self.params.get("bias", shape=(units,))

    def hybrid_forward(self, F, x, weight, bias):
        return F.broadcast_add(self._product(F, x, weight), bias.reshape((1, -1)))


@pytest.mark.parametrize("hybridize", [False, True])
def test_fully_connected_sparse_gradient_equals_mxnet_sparse_dot(hybridize):
    in_units, units = 200000, 16
    scipy_x = random_csr(10, in_units, 10, seed=11, duplicates_across_rows=False)
    x = to_mx(scipy_x)
    ours = FullyConnectedSparse(units, in_units=in_units, bias_initializer="normal")
    ref = MXNetSparseDotLayer(units, in_units)
    ours.initialize(mx.init.Normal(0.1))
    ref.initialize()
    ref.weight.set_data(ours.weight.data())
    ref.bias.set_data(ours.bias.data())
    if hybridize:
        ours.hybridize(static_alloc=True)
        ref.hybridize(static_alloc=True)
    head = mx.nd.array(np.random.RandomState(0).randn(10, units))
    for step in range(2):  # the second step reuses the cached graph's arrays
        grads = list(reference_block_gradients(ours, x, head).values())
        ref_grads = list(reference_block_gradients(ref, x, head).values())
        assert grads[0].stype == "row_sparse"
        np.testing.assert_array_equal(grads[0].indices.asnumpy(), ref_grads[0].indices.asnumpy())
        np.testing.assert_allclose(grads[0].data.asnumpy(), ref_grads[0].data.asnumpy(),
                                   rtol=1e-6, atol=1e-6)
        # The bias goes through gluon_sparse_dot's fused add, summed as MXNet's broadcast_add.
        np.testing.assert_array_equal(grads[1].asnumpy(), ref_grads[1].asnumpy())
        x = to_mx(random_csr(10, in_units, 10, seed=12 + step, duplicates_across_rows=False))


def test_grad_req_add_is_refused():
    layer = FullyConnectedSparse(3, in_units=10)
    layer.initialize()
    layer.weight.grad_req = "add"
    with pytest.raises(ValueError, match="grad_req='add'"):
        layer(to_mx(random_csr(2, 10, 2, seed=0)))


@pytest.mark.parametrize("hybridize", [False, True])
def test_factorization_machine_gradient_rows_are_the_batch_features(hybridize):
    in_units = 100000
    scipy_x = random_csr(8, in_units, 6, seed=13)
    fm = FactorizationMachine(5, in_units=in_units, linear_initializer=mx.init.Normal(0.1))
    fm.initialize()
    if hybridize:
        fm.hybridize(static_alloc=True)
    with autograd.record():
        out = fm(to_mx(scipy_x))
    out.backward()
    rows = np.unique(scipy_x.indices)
    for param in (fm.factor, fm.linear):
        assert param.grad().stype == "row_sparse"
        np.testing.assert_array_equal(param.grad().indices.asnumpy(), rows)
    # Gradients against NumPy on the touched rows only (the others are zero by construction).
    x = scipy_x[:, rows].toarray()
    V = fm.factor.data().asnumpy()[rows]
    xv = x @ V
    np.testing.assert_allclose(fm.factor.grad().data.asnumpy(),
                               x.T @ xv - (x ** 2).sum(axis=0)[:, None] * V, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(fm.linear.grad().data.asnumpy(), x.sum(axis=0)[:, None],
                               rtol=1e-5, atol=1e-6)
