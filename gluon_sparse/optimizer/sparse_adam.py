"""Standard (non-lazy) Adam whose row_sparse updates run in gluon-sparse's operator.

MXNet 1.9.1 applies ``adam_update(lazy_update=False)`` to a row_sparse gradient
with a num_rows-long sequential prefix sum and a generic kernel; on a
1,000,000 x 128 weight that step costs far more than the memory it must touch.
:class:`SparseAdam` keeps ``mx.optimizer.Adam``'s arguments, state layout and
results but sends those updates to ``gluon_sparse_adam_update`` (csrc/ops/adam_op.cc), a
single-pass CPU/CUDA kernel with the same arithmetic.
"""
import logging
import math

import mxnet as mx
import numpy as np

from .. import _interrupt, _native
from . import _adamw, _family
from . import deferred as deferred_adam

__all__ = ["SparseAdam"]

logger = logging.getLogger(__name__)

# Dtypes the operator implements; others (float16 without multi_precision)
# take MXNet's own adam_update so results match mx.optimizer.Adam's.
_OP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# Weights per fused call of gluon_sparse_adam_multi_update (MXNet's Updater
# hands update_multi_precision up to aggregate_num weights of one dtype at once).
_AGGREGATE_NUM = 64


def _adam_op():
    """``mx.nd.gluon_sparse_adam_update``, loading the operator library on first use."""
    _native.load_ops()
    return mx.nd.gluon_sparse_adam_update


def _adam_multi_op():
    """``mx.nd.gluon_sparse_adam_multi_update``, loading the operator library on first use."""
    _native.load_ops()
    return mx.nd.gluon_sparse_adam_multi_update


@mx.optimizer.Optimizer.register
class SparseAdam(mx.optimizer.Adam):
    """Adam with MXNet's standard-update semantics and a fast row_sparse path.

    Registered as ``'sparseadam'``. Accepts the arguments of
    :class:`mxnet.optimizer.Adam` and produces its results, but
    ``lazy_update`` defaults to ``False``: every row of the weight, mean and
    variance moves at every step, rows absent from the gradient with gradient
    0 (plus ``wd * weight``), which is the Adam of the paper. Updates are routed
    by gradient:

    * row_sparse gradient, ``lazy_update=False``: gluon-sparse's
      ``gluon_sparse_adam_update`` operator (one pass over the data, threads on CPU, CUDA
      on GPU), bitwise equal to MXNet's ``adam_update(lazy_update=False)`` on CPU
      on the same row_sparse gradient (MXNet's dense-gradient kernel rounds the
      rows with a gradient differently, by up to 1 ulp a step);
    * dense gradient: MXNet's ``adam_update``, or on CPU, when Trainer hands
      every parameter over at once (``aggregate_num``), all dense float32 or
      float64 weights in one call of ``gluon_sparse_adam_multi_update``, with
      ``adam_update``'s arithmetic (bitwise): one engine operation a step
      instead of one per bias or small layer;
    * ``lazy_update=True``: MXNet's lazy ``adam_update`` (only the gradient's
      rows move).

    float16 weights with ``multi_precision=True`` are updated through a float32
    master copy exactly as ``mx.optimizer.Adam`` does.

    Parameters
    ----------
    learning_rate : float, default 0.001
        Step size; Adam's bias correction ``sqrt(1 - beta2**t) / (1 - beta1**t)``
        is folded into it at every step, as in MXNet.
    beta1 : float, default 0.9
        Decay rate of the first-moment (mean) estimate.
    beta2 : float, default 0.999
        Decay rate of the second-moment (variance) estimate.
    epsilon : float, default 1e-8
        Added to ``sqrt(var)`` to avoid division by zero.
    lazy_update : bool, default False
        If True, update only the rows present in a row_sparse gradient
        (MXNet's lazy Adam, which changes the optimisation).
    flush_denormals : bool, default False
        CPU only: let the operator flush denormal values (below 1.2e-38 in
        float32) to zero. Means of rows long absent from the gradient decay
        into that range, where x86 arithmetic is tens of times slower; flushing
        keeps the update fast at the cost of bitwise equality with MXNet (the
        difference stays below 1e-30 of a weight).
    deferred : bool, default False
        Standard Adam at the cost of lazy Adam: weights with a row_sparse
        gradient are updated only on the gradient's rows, the other rows catch
        up (bitwise, replaying the steps they missed) when gluon-sparse's blocks
        read them, and all of them whenever Gluon reads a weight outside a
        forward pass or a training step (``param.data()``, ``save_parameters``,
        ``export``, pickling, ``Trainer.save_states``) or writes one
        (``set_data``, ``load_parameters``, ``initialize(force_reinit=True)``,
        a kvstore pull, ``Trainer.load_states``). See
        :mod:`gluon_sparse.optimizer.deferred` and the optimizer guide.
    decoupled_wd : bool, default False
        AdamW (Loshchilov & Hutter's decoupled weight decay): ``wd`` no longer
        enters the gradient but shrinks the weight directly,
        ``w -= eta * (m / (sqrt(v) + epsilon) + wd * w)`` with ``eta`` the
        bias-corrected learning rate, exactly MXNet's ``adamw_update`` as MXNet
        2.0's ``mx.optimizer.AdamW`` calls it (bitwise, float32 and float64).
        Works eager and ``deferred`` (rows absent from a batch keep decaying);
        not with ``lazy_update`` or ``flush_denormals``. See
        :mod:`gluon_sparse.optimizer._adamw`.
    **kwargs
        Passed to :class:`mxnet.optimizer.Optimizer`: ``wd``, ``rescale_grad``,
        ``clip_gradient``, ``lr_scheduler``, ``multi_precision``, ``param_dict``, ...

    Examples
    --------
    >>> import mxnet as mx
    >>> import gluon_sparse.optimizer
    >>> net = mx.gluon.nn.Dense(1)
    >>> net.initialize()
    >>> trainer = mx.gluon.Trainer(net.collect_params(), 'sparseadam',
    ...                            {'learning_rate': 0.01, 'wd': 1e-4})
    """

    decoupled_wd = False  # (also for optimizers pickled before the option existed)

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 lazy_update=False, flush_denormals=False, deferred=False, decoupled_wd=False,
                 **kwargs):
        super().__init__(learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                         epsilon=epsilon, lazy_update=lazy_update, **kwargs)
        if deferred and (lazy_update or flush_denormals):
            raise ValueError("deferred=True replays standard Adam exactly; it cannot be "
                             "combined with lazy_update=True or flush_denormals=True")
        self.flush_denormals = flush_denormals
        self.deferred = deferred
        self.decoupled_wd = bool(decoupled_wd)
        # Dense weights of one dtype are updated together, in one operator call
        # (update_multi_precision): per weight, a Python call and an engine
        # operation cost more than the arithmetic of a bias.
        self.aggregate_num = _AGGREGATE_NUM
        if self.decoupled_wd:
            _adamw.check_options(self)

    def create_state(self, index, weight):
        """``(mean, var)``, or a deferred state for a row_sparse-gradient weight if ``deferred``."""
        if self.decoupled_wd:
            return _adamw.create_state(self, index, weight)
        if self.deferred:
            state = deferred_adam.create_state(self, index, weight)
            if state is not None:
                return state
        return super().create_state(index, weight)

    def flush(self):
        """Bring every row this optimizer deferred up to date (no-op unless ``deferred``)."""
        deferred_adam.flush(self)

    def _step_lr_wd(self, index):
        """Count a step of ``index``; its bias-corrected lr and its wd, as MXNet's Adam."""
        self._update_count(index)
        lr = self._get_lr(index)
        wd = self._get_wd(index)
        t = self._index_update_count[index]
        # Same float64 expression as mx.optimizer.Adam, so lr rounds identically.
        lr *= math.sqrt(1. - self.beta2 ** t) / (1. - self.beta1 ** t)
        return lr, wd

    def _fusable(self, weight, grad, state):
        """Whether MXNet would update this weight with a dense adam_update, on CPU."""
        return (not self.decoupled_wd and isinstance(state, tuple) and len(state) == 2
                and all(isinstance(s, mx.nd.NDArray) for s in state)
                and weight.stype == "default" and grad.stype == "default"
                and np.dtype(weight.dtype) in _OP_DTYPES
                and weight.context.device_type == "cpu")

    def update_multi_precision(self, index, weight, grad, state):
        """Update one weight, or several at once (MXNet's aggregated update).

        With lists (``aggregate_num > 0``: Trainer hands every parameter in
        one call), the dense CPU weights go to ``gluon_sparse_adam_multi_update``
        together, each with what ``adam_update`` would give it (with
        ``decoupled_wd``, the dense float32 ones to
        ``gluon_sparse_adamw_multi_update``, MXNet's ``adamw_update``); the others
        (row_sparse gradients, deferred state, float16 master copies, GPU)
        take :meth:`update` one by one. Steps are counted, and learning rates
        computed, in the order of ``index``, as one-by-one updates would.
        Ctrl-C waits for the end of the call (the updates happen all or none).
        """
        with _interrupt.held_back():
            if isinstance(index, (list, tuple)):
                self._update_list(index, weight, grad, state)
            else:
                super().update_multi_precision(index, weight, grad, state)

    def _update_list(self, index, weight, grad, state):
        fused, decoupled = {}, []
        for i, w, g, s in zip(index, weight, grad, state):
            if self._fusable(w, g, s):
                lr, wd = self._step_lr_wd(i)
                fused.setdefault(np.dtype(w.dtype), []).append((w, g, s, lr, wd))
            elif self.decoupled_wd and _family.dense_fusable(_adamw.ADAMW, w, g, s):
                self._update_count(i)
                decoupled.append((w, g, list(s), _adamw.ADAMW.step(self, i)))
            else:
                super().update_multi_precision(i, w, g, s)
        for group in fused.values():
            self._fused_update(group)
        if decoupled:  # AdamW: the family's multi-update of its rule
            _family.fused_dense_update(self, _adamw.ADAMW, decoupled)

    def _fused_update(self, group):
        inputs = []
        for w, g, (mean, var), _, _ in group:
            inputs += [w, g, mean, var]
        kwargs = {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                  "rescale_grad": self.rescale_grad}
        if self.clip_gradient:
            kwargs["clip_gradient"] = self.clip_gradient
        # str(float), as MXNet passes adam_update's lr and wd: parsed the same way.
        _adam_multi_op()(*inputs, out=[w for w, _, _, _, _ in group], num_weights=len(group),
                         lrs=",".join(str(lr) for _, _, _, lr, _ in group),
                         wds=",".join(str(wd) for _, _, _, _, wd in group), **kwargs)

    def _uses_operator(self, weight, grad):
        return (not self.lazy_update and grad.stype == "row_sparse"
                and np.dtype(weight.dtype) in _OP_DTYPES
                # The operator reads the indices as int64, MXNet's default.
                and np.dtype(grad._aux_type(0)) == np.int64)

    def update(self, index, weight, grad, state):
        """Apply one Adam step to ``weight`` and its ``state`` in place.

        Parameters
        ----------
        index : int
            Index of the parameter (keys its update count, lr_mult and wd_mult).
        weight : NDArray
            The parameter, dense or row_sparse (a row_sparse weight must store
            all its rows unless ``lazy_update``, as in MXNet).
        grad : NDArray
            Its gradient, dense or row_sparse.
        state : tuple of NDArray
            ``(mean, var)`` from :meth:`create_state`.
        """
        if self.decoupled_wd:
            _adamw.update(self, index, weight, grad, state)
            return
        if isinstance(state, deferred_adam.DeferredAdamState):
            deferred_adam.update(self, index, weight, grad, state)
            return
        if not self._uses_operator(weight, grad):
            super().update(index, weight, grad, state)
            return
        lr, wd = self._step_lr_wd(index)
        kwargs = {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                  "rescale_grad": self.rescale_grad}
        if self.clip_gradient:
            kwargs["clip_gradient"] = self.clip_gradient
        if self.flush_denormals:
            kwargs["flush_denormals"] = True
        mean, var = state
        _adam_op()(weight, grad, mean, var, out=weight, lr=lr, wd=wd, **kwargs)
