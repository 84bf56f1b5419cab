"""Blocks of gluon_sparse.nn against MXNet's own Dense and a NumPy reference."""
import mxnet as mx
import numpy as np
import pytest
import scipy.sparse as sp
from mxnet import autograd, gluon

from gluon_sparse.nn import FactorizationMachine, FullyConnectedSparse


def random_csr(rows, cols, density, seed, dtype="float32"):
    matrix = sp.random(rows, cols, density=density, format="csr", dtype=dtype,
                       random_state=np.random.RandomState(seed))
    matrix.sort_indices()
    return matrix


def to_mx(matrix):
    return mx.nd.sparse.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape,
                                   dtype=matrix.dtype)


def grads_of(block, x, head=None):
    """Run forward + backward (sum of outputs, or outputs * head) and return the output."""
    with autograd.record():
        out = block(x)
        loss = (out * head).sum() if head is not None else out.sum()
    loss.backward()
    return out


def dense_grad(param):
    grad = param.grad()
    return grad.tostype("default").asnumpy() if grad.stype != "default" else grad.asnumpy()


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("input_stype", ["csr", "default"])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_fully_connected_sparse_matches_dense(hybridize, input_stype, activation):
    in_units, units = 50, 7
    scipy_x = random_csr(6, in_units, 0.2, seed=0)
    x = to_mx(scipy_x) if input_stype == "csr" else mx.nd.array(scipy_x.toarray())
    sparse_layer = FullyConnectedSparse(units, activation=activation, in_units=in_units,
                                        bias_initializer="normal")
    dense_layer = gluon.nn.Dense(units, activation=activation, in_units=in_units)
    sparse_layer.initialize()
    dense_layer.initialize()
    dense_layer.weight.set_data(sparse_layer.weight.data().T)
    dense_layer.bias.set_data(sparse_layer.bias.data())
    if hybridize:
        sparse_layer.hybridize()
        dense_layer.hybridize()
    head = mx.nd.array(np.random.RandomState(1).randn(6, units))

    out_sparse = grads_of(sparse_layer, x, head)
    out_dense = grads_of(dense_layer, mx.nd.array(scipy_x.toarray()), head)

    np.testing.assert_allclose(out_sparse.asnumpy(), out_dense.asnumpy(), rtol=1e-5, atol=1e-6)
    assert sparse_layer.weight.grad().stype == "row_sparse"
    np.testing.assert_allclose(dense_grad(sparse_layer.weight), dense_grad(dense_layer.weight).T,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dense_grad(sparse_layer.bias), dense_grad(dense_layer.bias),
                               rtol=1e-5, atol=1e-6)
    # Only rows of features present in the batch carry gradient.
    touched = np.unique(scipy_x.indices)
    np.testing.assert_array_equal(np.sort(sparse_layer.weight.grad().indices.asnumpy()), touched)


def test_fully_connected_sparse_dense_weight_grad_option():
    layer = FullyConnectedSparse(3, in_units=20, weight_grad_stype="default")
    layer.initialize()
    grads_of(layer, to_mx(random_csr(4, 20, 0.3, seed=2)))
    assert layer.weight.grad().stype == "default"
    with pytest.raises(ValueError, match="weight_grad_stype"):
        FullyConnectedSparse(3, weight_grad_stype="csr")


@pytest.mark.parametrize("hybridize", [False, True])
def test_deferred_in_units_inferred_from_first_batch(hybridize):
    layer = FullyConnectedSparse(4, use_bias=False)
    layer.initialize()
    if hybridize:
        layer.hybridize()
    assert layer.in_units == 0
    x = to_mx(random_csr(3, 123, 0.1, seed=3))
    out = layer(x)
    assert out.shape == (3, 4)
    assert layer.weight.shape == (123, 4)
    assert layer.in_units == 123
    np.testing.assert_allclose(out.asnumpy(), x.asnumpy() @ layer.weight.data().asnumpy(),
                               rtol=1e-5, atol=1e-6)


def test_deferred_in_units_inside_hybridized_parent():
    """A hybridized parent infers shapes symbolically over the whole graph.

    MXNet's own dot cannot infer a partially known right-hand side (it fails on
    a weight of shape (unknown, units)); the operator library's sparse dot fills
    the weight's in_units from the batch width in its inferShape (lib_api lets
    an op modify its input shapes).
    """
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(8, activation="relu"), gluon.nn.Dense(2))
    net.initialize()
    net.hybridize()
    x = to_mx(random_csr(4, 77, 0.2, seed=10))
    out = net(x)
    assert out.shape == (4, 2)
    assert net[0].weight.shape == (77, 8)
    hidden = np.maximum(x.asnumpy() @ net[0].weight.data().asnumpy() + net[0].bias.data().asnumpy(), 0)
    expected = hidden @ net[1].weight.data().asnumpy().T + net[1].bias.data().asnumpy()
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_save_load_parameters_round_trip(tmp_path):
    x = to_mx(random_csr(5, 40, 0.2, seed=4))
    layer = FullyConnectedSparse(6, activation="tanh")
    layer.initialize(mx.init.Uniform())
    expected = layer(x).asnumpy()
    path = str(tmp_path / "fcs.params")
    layer.save_parameters(path)
    restored = FullyConnectedSparse(6, activation="tanh", in_units=40)
    restored.load_parameters(path)
    np.testing.assert_array_equal(restored(x).asnumpy(), expected)


_INITIALIZERS = {
    "default": None,
    "he": mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2),
    "xavier_out": mx.init.Xavier(factor_type="out"),
    "msra": mx.init.MSRAPrelu(),
    "xavier_name": "xavier",
    "normal": mx.init.Normal(0.3),
}


@pytest.mark.parametrize("init", sorted(_INITIALIZERS))
@pytest.mark.parametrize("given", ["block", "global"])
@pytest.mark.parametrize("in_units", [0, 300])
def test_weight_initialised_as_dense_initialises_its_own(init, given, in_units):
    # The weight is Dense's transposed, so an initializer reading fans from the
    # shape (Xavier's factor_type 'in'/'out') must see Dense's (units, in_units):
    # for one seed, the values are Dense's weight, in the same memory order.
    init = _INITIALIZERS[init]
    block_init = {"weight_initializer": init} if given == "block" else {}
    global_init = {"init": init} if given == "global" and init is not None else {}
    x = to_mx(random_csr(2, 300, 0.1, seed=1))
    mx.random.seed(7)
    dense = gluon.nn.Dense(16, in_units=300, **block_init)
    dense.initialize(**global_init)
    mx.random.seed(7)
    layer = FullyConnectedSparse(16, in_units=in_units, **block_init)
    layer.initialize(**global_init)
    layer(x)  # finishes a deferred initialisation
    expected = dense.weight.data().asnumpy()
    np.testing.assert_array_equal(layer.weight.data().asnumpy().reshape(16, 300), expected)


class _Fill(mx.init.Initializer):
    """A custom initializer as MXNet's tutorial writes them: unregistered, its argument
    not passed to Initializer.__init__ (so not in its dumps())."""

    def __init__(self, value):
        super().__init__()
        self.value = value

    def _init_weight(self, name, arr):
        arr[:] = self.value


def test_a_custom_initializer_and_one_given_to_the_parameter_are_honoured():
    # The wrapper re-created the initializer from its dumps(): an unregistered one was
    # refused, a registered one lost its arguments. And Parameter.initialize(init=...)
    # bypassed the wrapper: Xavier's fans swapped again.
    layer = FullyConnectedSparse(3, in_units=20, weight_initializer=_Fill(5.0))
    layer.initialize()
    np.testing.assert_array_equal(layer.weight.data().asnumpy(), np.full((20, 3), 5.0))
    he = mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)
    mx.random.seed(4)
    dense = gluon.nn.Dense(16, in_units=300)
    dense.weight.initialize(init=he)
    mx.random.seed(4)
    layer = FullyConnectedSparse(16, in_units=300)
    layer.weight.initialize(init=he)
    np.testing.assert_array_equal(layer.weight.data().asnumpy().reshape(16, 300),
                                  dense.weight.data().asnumpy())


def test_weight_initializer_survives_export(tmp_path):
    # The wrapper is a registered initializer: a symbol's __init__ attribute names it.
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(4, in_units=30, weight_initializer=mx.init.MSRAPrelu()))
    net.initialize()
    net.hybridize()
    net(to_mx(random_csr(2, 30, 0.2, seed=2)))
    net.export(str(tmp_path / "m"))
    attrs = mx.sym.load(str(tmp_path / "m-symbol.json")).attr_dict()
    weight_init = [a["__init__"] for name, a in attrs.items() if name.endswith("weight")][0]
    recreated = mx.init.create(weight_init)
    mx.random.seed(3)
    dense = gluon.nn.Dense(4, in_units=30, weight_initializer=mx.init.MSRAPrelu())
    dense.initialize()
    mx.random.seed(3)
    out = mx.nd.zeros((30, 4))
    recreated(mx.init.InitDesc("w_weight", global_init=mx.init.Uniform()), out)
    np.testing.assert_array_equal(out.asnumpy().reshape(4, 30), dense.weight.data().asnumpy())


def test_export_and_import_as_symbol_block(tmp_path):
    x = to_mx(random_csr(5, 40, 0.2, seed=5))
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(8, activation="sigmoid", in_units=40), gluon.nn.Dense(1))
    net.initialize(mx.init.Uniform())
    net.hybridize()
    expected = net(x).asnumpy()
    prefix = str(tmp_path / "model")
    net.export(prefix, epoch=3)
    imported = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0003.params")
    np.testing.assert_allclose(imported(x).asnumpy(), expected, rtol=1e-6, atol=1e-7)


def test_mlp_trains_with_row_sparse_gradients():
    """A short SGD run lowers the loss and only the batch's weight rows change."""
    mx.random.seed(0)  # the initial weights: not whatever state earlier tests left
    scipy_x = random_csr(64, 300, 0.05, seed=6)
    y = mx.nd.array((scipy_x.sum(axis=1).A1 > np.median(scipy_x.sum(axis=1).A1)).astype("float32"))
    x = to_mx(scipy_x)
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(16, activation="sigmoid", in_units=300), gluon.nn.Dense(1))
    net.initialize(mx.init.Xavier(), force_reinit=True)
    net.hybridize()
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    first_batch = x[0:8]
    net(first_batch)
    before = net[0].weight.data().asnumpy().copy()
    with autograd.record():
        loss = loss_fn(net(first_batch), y[0:8])
    loss.backward()
    trainer.step(8)
    changed = np.where(np.any(net[0].weight.data().asnumpy() != before, axis=1))[0]
    np.testing.assert_array_equal(changed, np.unique(scipy_x[0:8].indices))

    losses = []
    for _ in range(100):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(64)
        losses.append(loss.mean().asscalar())
    assert losses[-1] < losses[0] * 0.9


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("block_factory", [lambda: FullyConnectedSparse(3, in_units=10),
                                           lambda: FactorizationMachine(2, in_units=10)])
@pytest.mark.parametrize("hybridize", [False, True])
def test_bad_input_errors_name_the_shapes(block_factory, hybridize):
    block = block_factory()
    block.initialize()
    if hybridize:
        block.hybridize()
    with pytest.raises(ValueError, match=r"10 input features.*\(4, 11\)"):
        block(to_mx(random_csr(4, 11, 0.3, seed=7)))
    with pytest.raises(ValueError, match=r"2-D.*\(10,\)"):
        block(mx.nd.ones((10,)))
    with pytest.raises(ValueError, match=r"2-D.*\(2, 3, 10\)"):
        block(mx.nd.ones((2, 3, 10)))
    with pytest.raises(TypeError, match=r"floating-point.*int32"):
        block(mx.nd.ones((2, 10), dtype="int32"))
    with pytest.raises(TypeError, match=r"float32 parameters.*float64"):
        block(mx.nd.ones((2, 10), dtype="float64"))


@pytest.mark.parametrize("block_factory,width", [(lambda: FullyConnectedSparse(3, in_units=10), 3),
                                                 (lambda: FactorizationMachine(2, in_units=10), 1)])
def test_empty_batch_and_batch_without_nonzeros(block_factory, width):
    block = block_factory()
    block.initialize()
    empty = mx.nd.sparse.csr_matrix((np.zeros(0, "float32"), np.zeros(0, "int64"), np.zeros(1, "int64")),
                                    shape=(0, 10))
    assert block(empty).shape == (0, width)
    no_nonzeros = mx.nd.sparse.csr_matrix(
        (np.zeros(0, "float32"), np.zeros(0, "int64"), np.zeros(4, "int64")), shape=(3, 10))
    out = grads_of(block, no_nonzeros)
    assert out.shape == (3, width)
    # Output is the bias alone; no weight row receives gradient.
    bias = block.bias.data().asnumpy()
    np.testing.assert_allclose(out.asnumpy(), np.broadcast_to(bias, (3, width)), rtol=1e-6)
    first = block.weight if isinstance(block, FullyConnectedSparse) else block.factor
    assert np.all(dense_grad(first) == 0)


# --------------------------------------------------------------------------- factorization machine


def numpy_fm(x, V, w, b):
    """Rendle's FM and its gradients, written directly from the formula."""
    xv = x @ V
    out = b + x @ w + 0.5 * np.sum(xv ** 2 - (x ** 2) @ (V ** 2), axis=1, keepdims=True)
    # d out_n / d V_if = x_ni * (xv_nf - V_if * x_ni); summed over the batch (head = 1)
    grad_V = x.T @ xv - (x ** 2).sum(axis=0)[:, None] * V
    grad_w = x.sum(axis=0)[:, None]
    grad_b = np.array([x.shape[0]], dtype=x.dtype)
    return out, grad_V, grad_w, grad_b


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_factorization_machine_matches_numpy(hybridize, dtype):
    in_units, k = 30, 4
    scipy_x = random_csr(8, in_units, 0.25, seed=8, dtype=dtype)
    fm = FactorizationMachine(k, in_units=in_units, dtype=dtype,
                              factor_initializer=mx.init.Normal(0.5),
                              linear_initializer=mx.init.Normal(0.5), bias_initializer="ones")
    fm.initialize()
    if hybridize:
        fm.hybridize()
    out = grads_of(fm, to_mx(scipy_x))
    V, w, b = (p.data().asnumpy() for p in (fm.factor, fm.linear, fm.bias))
    ref_out, ref_V, ref_w, ref_b = numpy_fm(scipy_x.toarray(), V, w, b)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.asnumpy(), ref_out, **tol)
    assert fm.factor.grad().stype == "row_sparse" and fm.linear.grad().stype == "row_sparse"
    np.testing.assert_allclose(dense_grad(fm.factor), ref_V, **tol)
    np.testing.assert_allclose(dense_grad(fm.linear), ref_w, **tol)
    np.testing.assert_allclose(dense_grad(fm.bias), ref_b, **tol)


@pytest.mark.parametrize("hybridize", [False, True])
def test_factorization_machine_sums_a_repeated_column_as_the_dense_matrix_has_it(hybridize):
    """A row holding column 3 twice (3:1 3:2) stands for x_3 = 3: the FM's output and
    gradients are those of the dense row (the squared term squared entry by entry gave
    1 + 4 instead of 9)."""
    in_units, k = 10, 4
    fm = FactorizationMachine(k, in_units=in_units, factor_initializer=mx.init.Normal(0.5),
                              linear_initializer=mx.init.Normal(0.5))
    fm.initialize()
    if hybridize:
        fm.hybridize()
    indices, indptr = np.array([3, 3, 7, 1, 1]), np.array([0, 3, 5])
    data = np.array([1.0, 2.0, 0.5, 1.5, -0.5], dtype=np.float32)
    x = mx.nd.sparse.csr_matrix((data, indices, indptr), shape=(2, in_units))
    out = grads_of(fm, x)
    V, w, b = (p.data().asnumpy() for p in (fm.factor, fm.linear, fm.bias))
    dense = sp.csr_matrix((data, indices, indptr), shape=(2, in_units)).toarray()  # summed
    ref_out, ref_V, ref_w, _ = numpy_fm(dense, V, w, b)
    np.testing.assert_allclose(out.asnumpy(), ref_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dense_grad(fm.factor), ref_V, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dense_grad(fm.linear), ref_w, rtol=1e-5, atol=1e-6)


def test_a_scipy_batch_is_refused_with_the_conversion_to_use():
    layer = FullyConnectedSparse(3, in_units=10)
    layer.initialize()
    with pytest.raises(TypeError, match="csr_to_ndarray"):
        layer(random_csr(2, 10, 0.3, seed=0))


def test_factorization_machine_deferred_init_and_round_trip(tmp_path):
    x = to_mx(random_csr(4, 25, 0.3, seed=9))
    fm = FactorizationMachine(3)
    fm.initialize(mx.init.Normal(0.3))
    out = fm(x).asnumpy()
    assert fm.factor.shape == (25, 3) and fm.linear.shape == (25, 1)
    path = str(tmp_path / "fm.params")
    fm.save_parameters(path)
    restored = FactorizationMachine(3, in_units=25)
    restored.load_parameters(path)
    np.testing.assert_array_equal(restored(x).asnumpy(), out)


def fm_input_jacobian(x, V, w):
    """d y / d x of a factorization machine, float64 NumPy: (batch, in_units)."""
    return w.ravel()[None, :] + (x @ V) @ V.T - x * (V ** 2).sum(axis=1)[None, :]


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("kind", ["fc", "fm", "fc_dense_grad"])
def test_input_gradient_of_dense_input(kind, hybridize):
    """A dense input that needs a gradient gets it (the products themselves do not
    differentiate with respect to their data), and the weight's stays row_sparse."""
    rng = np.random.RandomState(3)
    head = rng.standard_normal((5, 3 if kind != "fm" else 1)).astype(np.float32)
    if kind == "fm":
        layer = FactorizationMachine(4, in_units=6)
    else:
        layer = FullyConnectedSparse(3, in_units=6, activation="tanh", weight_grad_stype=(
            "default" if kind == "fc_dense_grad" else "row_sparse"))
    layer.initialize(mx.init.Uniform(0.5))
    if hybridize:
        layer.hybridize()
    x_np = rng.rand(5, 6).astype(np.float32)
    x = mx.nd.array(x_np)
    x.attach_grad()
    out = grads_of(layer, x, mx.nd.array(head))
    if kind == "fm":
        V, w = layer.factor.data().asnumpy(), layer.linear.data().asnumpy()
        expected = head.astype(np.float64) * fm_input_jacobian(x_np.astype(np.float64), V, w)
        weight = layer.factor
    else:
        W = layer.weight.data().asnumpy().astype(np.float64)
        pre = x_np.astype(np.float64) @ W + layer.bias.data().asnumpy()
        expected = (head * (1 - np.tanh(pre) ** 2)) @ W.T
        np.testing.assert_allclose(out.asnumpy(), np.tanh(pre), rtol=1e-5, atol=1e-6)
        weight = layer.weight
    np.testing.assert_allclose(x.grad.asnumpy(), expected, rtol=1e-4, atol=1e-6)
    assert weight.grad().stype == ("default" if kind == "fc_dense_grad" else "row_sparse")
    # The same block then takes plain data (no gradient wanted) on its O(nnz) path.
    grads_of(layer, mx.nd.array(x_np))
    assert layer._traced_input_grad is False


@pytest.mark.parametrize("hybridize", [False, True])
def test_layer_before_a_sparse_layer_trains(hybridize):
    """Dense -> FullyConnectedSparse gives the first layer Dense -> Dense's gradient
    (it used to be zero: nothing before a sparse layer trained)."""
    x = mx.nd.array(np.random.RandomState(4).rand(3, 4))
    sparse = gluon.nn.HybridSequential()
    sparse.add(gluon.nn.Dense(6, in_units=4), FullyConnectedSparse(2, in_units=6))
    sparse.initialize(mx.init.Uniform(0.5))
    dense = gluon.nn.HybridSequential()
    dense.add(gluon.nn.Dense(6, in_units=4), gluon.nn.Dense(2, in_units=6))
    dense.initialize()
    dense[0].weight.set_data(sparse[0].weight.data())
    dense[0].bias.set_data(sparse[0].bias.data())
    dense[1].weight.set_data(sparse[1].weight.data().T)
    dense[1].bias.set_data(sparse[1].bias.data())
    if hybridize:
        sparse.hybridize()
        dense.hybridize()
    out_sparse, out_dense = grads_of(sparse, x), grads_of(dense, x)
    np.testing.assert_allclose(out_sparse.asnumpy(), out_dense.asnumpy(), rtol=1e-6)
    expected = dense[0].weight.grad().asnumpy()
    assert np.abs(expected).sum() > 0
    np.testing.assert_allclose(sparse[0].weight.grad().asnumpy(), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dense_grad(sparse[1].weight), dense[1].weight.grad().asnumpy().T,
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("indices, indptr, message", [
    ([1, 10 ** 9], [0, 1, 2], r"CSR column index 1000000000 \(row 1, entry 1\) is outside"),
    ([1, -1], [0, 1, 2], r"CSR column index -1 \(row 1, entry 1\) is outside"),
    ([1, 50], [0, 1, 2], r"CSR column index 50 \(row 1, entry 1\) is outside \[0, 50\)"),
    ([1, 2], [0, 1, 5], "indptr .* is not a row pointer array"),
    ([1, 2], [0, 2, 1], "indptr .* is not a row pointer array")])
def test_dense_weight_gradient_path_refuses_a_bad_csr(indices, indptr, message):
    """weight_grad_stype='default' runs MXNet's sparse.dot, which reads the batch unchecked
    (a column past the weight crashed the process, one at its end was dropped)."""
    layer = FullyConnectedSparse(3, in_units=50, weight_grad_stype="default")
    layer.initialize()
    x = mx.nd.sparse.csr_matrix((np.ones(2, np.float32), np.array(indices), np.array(indptr)),
                                shape=(2, 50))
    with pytest.raises(ValueError, match=message):
        layer(x)


@pytest.mark.parametrize("hybridize", [False, True])
def test_dense_gradient_path_sums_a_repeated_column(hybridize):
    """weight_grad_stype='default' (MXNet's sparse.dot): a row listing column 5 twice has
    the gradient of their sum (MXNet's imperative backward assigned one of them)."""
    layer = FullyConnectedSparse(2, in_units=10, weight_grad_stype="default")
    layer.initialize()
    if hybridize:
        layer.hybridize()
    x = mx.nd.sparse.csr_matrix((np.array([1.0, 2.0, 4.0], np.float32), np.array([5, 5, 3]),
                                 np.array([0, 3])), shape=(1, 10))
    grads_of(layer, x)
    grad = layer.weight.grad().asnumpy()
    np.testing.assert_array_equal(grad[[3, 5, 7]], [[4.0, 4.0], [3.0, 3.0], [0.0, 0.0]])


class _ScaledInput(gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        with self.name_scope():
            self.fc = FullyConnectedSparse(3, in_units=50)

    def hybrid_forward(self, F, x):
        return self.fc(x * 0.5)


def test_input_computed_from_data_alone_keeps_the_sparse_path():
    """In a hybridized parent, an input computed from the data alone (x * 0.5) needs no
    gradient: no dense input-gradient term (it made every step dense, 70x slower)."""
    net = _ScaledInput()
    net.initialize()
    net.hybridize()
    x = to_mx(random_csr(4, 50, 0.1, seed=5))
    grads_of(net, x)
    assert net.fc._traced_input_grad is False
    assert net.fc.weight.grad().stype == "row_sparse"
