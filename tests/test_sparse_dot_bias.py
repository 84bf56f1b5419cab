"""gluon_sparse_dot's fused bias (``with_bias``) against MXNet's own broadcast_add.

The fused forward adds the bias after the product, and its bias gradient sums
ograd over the batch in MXNet's order and rounding (csrc/ops/column_sum.h), so
every comparison here is bitwise: a model trained with the fused op is the
model trained with a separate add.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_sparse import _native
from gluon_sparse.nn import FullyConnectedSparse

from test_sparse_dot_op import MXNetSparseDotLayer, random_csr, to_mx

_native.load_ops()


def _marked(array, stype="default"):
    array = array.copy()
    grad = (mx.nd.sparse.zeros(stype, array.shape, dtype=array.dtype) if stype != "default"
            else mx.nd.zeros(array.shape, dtype=array.dtype))
    autograd.mark_variables([array], [grad])
    return array, grad


def _fused_and_separate(x, weight, bias, head):
    """(out, weight grad, bias grad) of the fused op and of dot + MXNet's broadcast_add."""
    results = []
    for fused in (True, False):
        w, w_grad = _marked(weight, "row_sparse")
        b, b_grad = _marked(bias)
        with autograd.record():
            if fused:
                out = mx.nd.gluon_sparse_dot(x, w, b, with_bias=True)
            else:
                out = mx.nd.broadcast_add(mx.nd.gluon_sparse_dot(x, w), b.reshape((1, -1)))
        out.backward(head)
        results.append((out.asnumpy(), w_grad.indices.asnumpy(), w_grad.data.asnumpy(),
                        b_grad.asnumpy()))
    return results


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch,units", [(1, 1), (7, 5), (300, 257), (64, 1030)])
def test_fused_bias_is_bitwise_the_separate_add(dtype, batch, units):
    rng = np.random.RandomState(batch * 1000 + units)
    x = to_mx(random_csr(batch, 500, 4, seed=units, dtype=dtype))
    weight = mx.nd.array(rng.randn(500, units), dtype=dtype)
    bias = mx.nd.array(rng.randn(units) * 3, dtype=dtype)
    # Magnitudes spread over many binades, so that the compensated sum's
    # residual matters and a plain sum would differ in the last bits.
    head = mx.nd.array(rng.randn(batch, units) * 10.0 ** rng.randint(-6, 6, (batch, units)),
                       dtype=dtype)
    fused, separate = _fused_and_separate(x, weight, bias, head)
    for ours, theirs in zip(fused, separate):
        np.testing.assert_array_equal(ours, theirs)


def test_fused_bias_gradient_overflow_and_specials_as_mxnet():
    """Sums that overflow (MXNet resets its residual there), infinities and NaN."""
    units = 6
    x = to_mx(random_csr(5, 50, 3, seed=0))
    weight = mx.nd.ones((50, units))
    bias = mx.nd.zeros(units)
    big = np.finfo(np.float32).max
    head = np.array([[big, -big, np.inf, 1.0, np.nan, 1e-30],
                     [big, big, -np.inf, -1.0, 1.0, 1e30],
                     [-big, 1.0, 1.0, np.inf, 1.0, -1e30],
                     [big, -big, 1.0, -np.inf, 1.0, 1e-30],
                     [1.0, 3.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
    fused, separate = _fused_and_separate(x, weight, bias, mx.nd.array(head))
    np.testing.assert_array_equal(fused[3], separate[3])


def test_fused_bias_with_dense_and_empty_data():
    units = 9
    rng = np.random.RandomState(1)
    weight = mx.nd.array(rng.randn(40, units))
    bias = mx.nd.array(rng.randn(units))
    dense = np.zeros((3, 40), np.float32)
    dense[0, 5], dense[2, 39] = 2.0, -1.5
    empty = mx.nd.sparse.csr_matrix((3, 40))
    for x in (mx.nd.array(dense), empty):
        head = mx.nd.array(rng.randn(3, units))
        fused, separate = _fused_and_separate(x, weight, bias, head)
        for ours, theirs in zip(fused, separate):
            np.testing.assert_array_equal(ours, theirs)


def test_bad_bias_is_an_error_naming_the_shapes():
    x = to_mx(random_csr(2, 10, 2, seed=0))
    with pytest.raises(mx.MXNetError, match=r"bias must have shape \(4,\).*\(10, 4\).*length 3"):
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 4)), mx.nd.ones(3), with_bias=True).asnumpy()
    with pytest.raises(mx.MXNetError, match="bias .* must have the weight's dtype"):
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 4)), mx.nd.ones(4, dtype="float64"),
                               with_bias=True).asnumpy()
    with pytest.raises(mx.MXNetError, match="with_bias='yes' is not a boolean"):
        mx.nd.gluon_sparse_dot(x, mx.nd.ones((10, 4)), mx.nd.ones(4), with_bias="yes").asnumpy()


def separate_bias_layer(units, in_units):
    """FullyConnectedSparse before the fusion: the product, then MXNet's broadcast_add."""
    return MXNetSparseDotLayer(units, in_units,
                               product=lambda F, x, weight: F.gluon_sparse_dot(x, weight))


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("optimizer", ["sgd", "sparseadam"])
def test_training_with_the_fused_bias_is_bitwise_the_separate_add(hybridize, optimizer):
    in_units, units = 300, 12
    ours = FullyConnectedSparse(units, in_units=in_units)
    ref = separate_bias_layer(units, in_units)
    ours.initialize(mx.init.Normal(0.5))
    ref.initialize()
    ref.weight.set_data(ours.weight.data())
    ref.bias.set_data(mx.nd.array(np.random.RandomState(3).randn(units)))
    ours.bias.set_data(ref.bias.data())
    if hybridize:
        ours.hybridize(static_alloc=True)
        ref.hybridize(static_alloc=True)
    trainers = [gluon.Trainer(block.collect_params(), optimizer, {"learning_rate": 0.05})
                for block in (ours, ref)]
    for step in range(6):
        x = to_mx(random_csr(16, in_units, 5, seed=step))
        target = mx.nd.array(np.random.RandomState(step).randn(16, units))
        for block, trainer in zip((ours, ref), trainers):
            with autograd.record():
                out = mx.nd.tanh(block(x))
                loss = ((out - target) ** 2).sum()
            loss.backward()
            trainer.step(16)
    np.testing.assert_array_equal(ours.weight.data().asnumpy(), ref.weight.data().asnumpy())
    np.testing.assert_array_equal(ours.bias.data().asnumpy(), ref.bias.data().asnumpy())


@pytest.mark.parametrize("hybridize", [False, True])
def test_bias_gradient_other_than_write_keeps_the_separate_add(hybridize):
    """lib_api does not tell the op to add rather than write: a bias whose gradient is
    accumulated ('add') or frozen ('null') is added by MXNet, also after a change of
    grad_req on a block already hybridized."""
    layer = FullyConnectedSparse(4, in_units=30)
    layer.initialize(mx.init.Normal(1.0))
    if hybridize:
        layer.hybridize()
    x = to_mx(random_csr(5, 30, 3, seed=0))
    head = mx.nd.array(np.random.RandomState(0).randn(5, 4))
    with autograd.record():
        out = layer(x)
    out.backward(head)
    once = layer.bias.grad().asnumpy().copy()
    weight_grad = layer.weight.grad().data.asnumpy().copy()
    np.testing.assert_allclose(once, head.asnumpy().sum(axis=0), rtol=1e-5)
    layer.bias.grad_req = "add"  # Gluon starts the gradient again from zero
    for _ in range(2):
        with autograd.record():
            out = layer(x)
        out.backward(head)
    np.testing.assert_array_equal(layer.bias.grad().asnumpy(), 2 * once)
    layer.bias.grad_req = "null"
    with autograd.record():
        out = layer(x)
    out.backward(head)
    np.testing.assert_array_equal(layer.weight.grad().data.asnumpy(), weight_grad)


def _two_layer_net(hybridize):
    net = gluon.nn.HybridSequential()
    net.add(FullyConnectedSparse(4, in_units=30), gluon.nn.Dense(2, in_units=4))
    net.initialize(mx.init.Normal(1.0))
    if hybridize:
        net.hybridize(static_alloc=True)
    return net


def _bias_grad_after(net, x, head, steps):
    for _ in range(steps):
        with autograd.record():
            out = net(x)
        out.backward(head)
    return net[0].bias.grad().asnumpy().copy()


def test_grad_req_add_under_a_hybridized_parent_needs_the_graph_rebuilt():
    """A hybridized parent reuses its graph, where gluon_sparse_dot writes the bias
    gradient: 'add' is refused until the parent's hybridize() drops that graph, never
    silently overwritten."""
    x = to_mx(random_csr(5, 30, 3, seed=0))
    head = mx.nd.array(np.random.RandomState(0).randn(5, 2))
    net = _two_layer_net(hybridize=True)
    once = _bias_grad_after(net, x, head, 1)
    with pytest.raises(ValueError, match=r"bias.grad_req cannot become 'add'.*hybridize\(\)"):
        net[0].bias.grad_req = "add"
    with pytest.raises(ValueError, match=r"weight.grad_req cannot become 'add'"):
        net[0].weight.grad_req = "add"
    assert net[0].bias.grad_req == "write"
    net.hybridize(static_alloc=True)
    net[0].bias.grad_req = "add"
    np.testing.assert_array_equal(_bias_grad_after(net, x, head, 2), 2 * once)
    net[0].bias.grad_req = "write"
    np.testing.assert_array_equal(_bias_grad_after(net, x, head, 2), once)


def test_grad_req_changes_without_a_hybridized_parent_are_followed():
    x = to_mx(random_csr(5, 30, 3, seed=0))
    head = mx.nd.array(np.random.RandomState(0).randn(5, 2))
    net = _two_layer_net(hybridize=False)
    net[0].hybridize()  # the layer's own graph: re-traced at its next call
    once = _bias_grad_after(net, x, head, 1)
    net[0].bias.grad_req = "add"
    np.testing.assert_array_equal(_bias_grad_after(net, x, head, 2), 2 * once)
    net[0].bias.grad_req = "null"  # a frozen bias: nothing to refuse, even under a parent
    hybrid = _two_layer_net(hybridize=True)
    _bias_grad_after(hybrid, x, head, 1)
    hybrid[0].bias.grad_req = "null"
    with autograd.record():
        out = hybrid(x)
    out.backward(head)
    assert hybrid[0].weight.grad().stype == "row_sparse"


def test_a_weight_without_a_shape_is_inferred_from_the_data_and_the_bias():
    """A hand-written symbol (Module.bind): the weight's shape follows from the data's
    width and the bias's length (it was an error naming a 0-D weight)."""
    data = mx.sym.var("data")
    out = mx.sym.gluon_sparse_dot(data, mx.sym.var("w"), mx.sym.var("b", shape=(3,)),
                                  with_bias=True)
    args, outs, _ = out.infer_shape(data=(4, 100))
    assert args == [(4, 100), (100, 3), (3,)] and outs == [(4, 3)]
    out = mx.sym.gluon_sparse_dot(data, mx.sym.var("w", shape=(100, 3)), mx.sym.var("b"),
                                  with_bias=True)
    assert out.infer_shape(data=(4, 100))[0] == [(4, 100), (100, 3), (3,)]


def test_the_add_guard_follows_the_parents_graph_not_the_childs_own():
    """Two ways round the guard, each leaving 'add' silently overwritten: the child's own
    hybridize() (the parent's graph still holds it), and a parameter shared by blocks of
    two parents where the other parent was re-hybridized."""
    x = to_mx(random_csr(5, 30, 3, seed=0))
    head = mx.nd.array(np.random.RandomState(0).randn(5, 2))
    net = _two_layer_net(hybridize=True)
    _bias_grad_after(net, x, head, 1)
    net[0].hybridize()
    with pytest.raises(ValueError, match=r"bias.grad_req cannot become 'add'"):
        net[0].bias.grad_req = "add"

    first = FullyConnectedSparse(3, in_units=30)
    second = FullyConnectedSparse(3, in_units=30, params=first.collect_params())
    parents = [gluon.nn.HybridSequential(), gluon.nn.HybridSequential()]
    parents[0].add(first)
    parents[1].add(second)
    first.initialize()
    for parent in parents:
        parent.hybridize()
        parent(x)
    parents[1].hybridize()  # drops the second parent's graph; the first still holds its own
    with pytest.raises(ValueError, match=r"bias.grad_req cannot become 'add'"):
        first.bias.grad_req = "add"
    parents[0].hybridize()
    first.bias.grad_req = "add"  # no graph holds the old trace now
    first.bias.zero_grad()
    for _ in range(2):
        with autograd.record():
            out = parents[0](x)
        out.backward()
    # out.backward() with a head of ones: 5 rows a pass, added up over the two passes.
    np.testing.assert_allclose(first.bias.grad().asnumpy(), np.full(3, 10.0), rtol=1e-6)
