"""The optimizer family's Python side: one :class:`Rule` and one optimizer class per optimizer.

An optimizer of the family is described once, in C++, as a rule
(``gluon_sparse/csrc/ops/optim_rule_<name>.h``: the per-element step and what a
step without gradient does); the operator library builds from it the eager
update, the deferred update, the flush and the in-graph row refresh, on CPU
and GPU. The Python side is as small:

* a :class:`Rule` subclass naming the C++ rule and turning the optimizer's
  hyper-parameters into the rule's scalars (:meth:`Rule.fixed`, constant over
  training; :meth:`Rule.step`, those of one update, with schedules and bias
  corrections folded in as MXNet's class folds them);
* a class ``Sparse<MXNet's class name>(SparseRuleMixin, mx.optimizer.<Class>)``
  registered in MXNet's registry, whose :meth:`~SparseRuleMixin._rule` picks
  the rule for its hyper-parameters (e.g. plain SGD for momentum 0).

:class:`SparseRuleMixin` routes each update:

* a state made with ``deferred=True`` (row_sparse gradient, Trainer parameter):
  ``gluon_sparse_<rule>_deferred_update`` through
  :class:`~gluon_sparse.optimizer._family_state.DeferredRuleState`; rows absent
  from the gradient catch up when read (``gluon_sparse_dot``, ``param.data()``,
  saving, pickling, kvstore pull, ...: see
  :mod:`gluon_sparse.optimizer._parameter_hooks`);
* row_sparse gradient, ``lazy_update=False``, float32/float64 weight:
  ``gluon_sparse_<rule>_update`` (every row steps, in one pass), with the
  state in MXNet's own layout;
* dense float32 weight and gradient on the CPU, with MXNet's state layout:
  ``gluon_sparse_<rule>_multi_update``, every such weight of a step in one
  call (MXNet's optimizer aggregation, ``aggregate_num``): the same element
  arithmetic as MXNet's dense update, without its per-weight operators;
* anything else (another dense gradient, ``lazy_update=True``, float16): MXNet's
  own update (``super().update``).

The result is MXNet's standard (dense-gradient) update of the same class,
bitwise on CPU where MXNet computes the step in one C++ kernel.
"""
import abc
import inspect

import mxnet as mx
import numpy as np

from .. import _interrupt, _native
from . import _family_state, deferred

__all__ = ["Rule", "SparseRuleMixin", "supports_deferred", "family_names"]

# Dtypes the operators implement; others take MXNet's own update.
_OP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

# Weights per call of gluon_sparse_<rule>_multi_update (MXNet's Updater hands
# update_multi_precision up to aggregate_num weights of one dtype at once).
AGGREGATE_NUM = 64


class Rule(abc.ABC):
    """The Python description of one C++ rule (``optim_rule_<name>.h``).

    Subclasses set the class attributes to the C++ rule's and implement
    :meth:`step` (and :meth:`fixed` when the rule has fixed scalars). Rules
    hold no per-optimizer data: one instance serves every optimizer.

    Attributes
    ----------
    name : str
        The C++ ``kName``; the operators are ``gluon_sparse_<name>_update``,
        ``..._deferred_update`` and ``..._deferred_flush``.
    state_names : tuple of str
        The C++ ``kStateNames``, in the order of MXNet's ``create_state``
        layout for this optimizer (``()`` for a rule without state).
    fixed_names : tuple of str
        The C++ ``kFixedNames``: scalars constant over training (the
        deferred replay uses them for every past step).
    step_names : tuple of str
        The C++ ``kStepNames``: the scalars of one update, recorded in the
        deferred history (one float32 record per step).
    """

    name = None
    state_names = ()
    fixed_names = ()
    step_names = ()

    def fixed(self, optimizer):
        """The fixed scalars of ``optimizer``: dict name -> float (``fixed_names``)."""
        return {}

    @abc.abstractmethod
    def step(self, optimizer, index, step=None):
        """The scalars of the update of weight ``index``: dict name -> float (``step_names``).

        Called once per update, after ``optimizer._update_count(index)``, so
        ``optimizer._index_update_count[index]`` is this update's 1-based count.
        ``step`` is the number of the deferred history's record this update
        writes (None: no history, an eager update): the number a rule's running
        marks (``_replay_marks``) are kept in. It is the optimizer's count
        unless MXNet restarted that count (a weight moved to another device id).
        """

    def create_states(self, optimizer, weight, zeros):
        """The initial state arrays, in ``state_names`` order (default: zeros).

        Parameters
        ----------
        optimizer : mxnet.optimizer.Optimizer
        weight : NDArray
        zeros : callable
            ``zeros(shape, ctx, dtype)``, the allocator the deferred state chose.
        """
        return [zeros(weight.shape, weight.context, np.dtype(weight.dtype))
                for _ in self.state_names]

    # Helpers for step(): the scalars every MXNet optimizer passes its operator.
    @staticmethod
    def lr_wd_clip(optimizer, index):
        """``{'lr', 'wd', 'clip_gradient'}`` as MXNet's classes compute them (no clip: -1)."""
        clip = optimizer.clip_gradient if optimizer.clip_gradient else -1.0
        return {"lr": float(optimizer._get_lr(index)), "wd": float(optimizer._get_wd(index)),
                "clip_gradient": float(clip)}

    def __repr__(self):
        return "<Rule %s>" % self.name


def family_names():
    """Names (lowercase, as registered in MXNet) of the optimizers of the family, sorted."""
    names = {"sparseadam"}
    for name, cls in mx.optimizer.Optimizer.opt_registry.items():
        if isinstance(cls, type) and issubclass(cls, SparseRuleMixin):
            names.add(name)
    return sorted(names)


def supports_deferred(name):
    """Whether the registered optimizer ``name`` takes ``deferred=True`` (a family member).

    Parameters
    ----------
    name : str
        An optimizer name as given to ``mx.optimizer.create`` (case-insensitive).

    Returns
    -------
    bool
    """
    return isinstance(name, str) and name.lower() in family_names()


def _as_list(state):
    """MXNet's state of one weight (None, an NDArray or a tuple) as a list of arrays."""
    if state is None:
        return []
    if isinstance(state, mx.nd.NDArray):
        return [state]
    return list(state)


class SparseRuleMixin(abc.ABC):
    """Routes an MXNet optimizer's updates to its family rule (see the module docstring).

    Put first among the bases: ``class SparseSGD(SparseRuleMixin, mx.optimizer.SGD)``.
    Takes the base class's arguments plus ``deferred=False``; ``lazy_update``
    (where the base has it) defaults to False. Subclasses implement
    :meth:`_rule`.
    """

    def __init__(self, *args, deferred=False, **kwargs):
        base = next(c for c in type(self).__mro__[1:]
                    if issubclass(c, mx.optimizer.Optimizer) and not issubclass(c, SparseRuleMixin))
        if "lazy_update" in inspect.signature(base.__init__).parameters:
            kwargs.setdefault("lazy_update", False)
        super().__init__(*args, **kwargs)
        if deferred and getattr(self, "lazy_update", False):
            raise ValueError("deferred=True replays the standard update exactly; it cannot be "
                             "combined with lazy_update=True")
        self.deferred = bool(deferred)
        # MXNet's SGD takes the weights in groups of its aggregate_num (4) and counts
        # a whole group's updates before it computes their learning rates; the other
        # classes count one weight at a time (0). Kept to count as the base class does.
        self._mxnet_group = self.aggregate_num
        self._precounted = None
        # Lists of weights reach update_multi_precision, which sends the dense ones
        # to the rule's multi-update in one call: per weight, a Python call and
        # MXNet's operators (up to ~15 for AdaGrad, AdaMax, Nadam) cost more than
        # the arithmetic of a bias.
        self.aggregate_num = AGGREGATE_NUM

    @abc.abstractmethod
    def _rule(self):
        """The :class:`Rule` for this optimizer's hyper-parameters."""

    # ------------------------------------------------------------------ states
    def create_state(self, index, weight):
        """A deferred state if ``deferred`` and deferral applies, else MXNet's own state
        (dense for a row_sparse weight: see :meth:`_update_row_sparse_weight`)."""
        if self.deferred:
            state = _family_state.create_state(self, self._rule(), index, weight)
            if state is not None:
                return state
        if self._updates_row_sparse_weight(weight):
            weight = mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype)
        return super().create_state(index, weight)

    def flush(self):
        """Bring every row this optimizer deferred up to date (no-op unless ``deferred``)."""
        deferred.flush(self)

    # ----------------------------------------------------------------- updates
    def _uses_operator(self, weight, grad):
        return (not getattr(self, "lazy_update", False) and grad.stype == "row_sparse"
                and weight.stype == "default" and np.dtype(weight.dtype) in _OP_DTYPES
                # The operators read the indices as int64, MXNet's default.
                and np.dtype(grad._aux_type(0)) == np.int64)

    def _updates_row_sparse_weight(self, weight):
        return (weight.stype == "row_sparse" and not getattr(self, "lazy_update", False)
                and np.dtype(weight.dtype) in _OP_DTYPES)

    def _steps_dense_copy(self, weight, grad):
        """Whether :meth:`update` steps ``weight`` through :meth:`_update_row_sparse_weight`."""
        return self._updates_row_sparse_weight(weight) and grad.stype == "row_sparse"

    def _update_row_sparse_weight(self, index, weight, grad, state):
        """One standard step of a row_sparse weight that holds every row: a kvstore's copy
        of a row_sparse-weight layer's weight (``FullyConnectedSparseRowSparseWeight``,
        ``SampledOutputRowSparseWeight``; on the parameter servers too).

        MXNet's own row_sparse updates are lazy for FTRL and NAG and missing for AdaGrad
        with ``wd > 0`` (its error was swallowed by the kvstore's updater: the weight
        never moved), so the weight is stepped as a dense array, as on one device, with
        dense states, and stored back with every row (an eager step: O(rows x columns)).
        """
        dense = weight.tostype("default")
        self.update(index, dense, grad, state)
        rows = mx.nd.arange(dense.shape[0], ctx=dense.context, dtype=np.int64)
        mx.nd.sparse.row_sparse_array((dense, rows), shape=dense.shape,
                                      ctx=dense.context).copyto(weight)

    def update(self, index, weight, grad, state):
        """Apply one step to ``weight`` and ``state`` in place (routed as the class docstring says).

        Parameters
        ----------
        index : int
            Index of the parameter (keys its update count, lr_mult and wd_mult).
        weight : NDArray
            The parameter.
        grad : NDArray
            Its gradient, dense or row_sparse.
        state : NDArray, tuple, None or DeferredRuleState
            From :meth:`create_state`.
        """
        rule = self._rule()
        if isinstance(state, _family_state.DeferredRuleState):
            _family_state.update(self, rule, index, weight, grad, state)
            return
        if self._steps_dense_copy(weight, grad):
            self._update_row_sparse_weight(index, weight, grad, state)
            return
        if not self._uses_operator(weight, grad) or len(_as_list(state)) != len(rule.state_names):
            # Also MXNet's update where the state is not the rule's: momentum set to 0
            # after the momentum state was made (MXNet's SGD and NAG then go on with
            # their momentum operators at momentum 0).
            super().update(index, weight, grad, state)
            return
        self._update_count(index)
        scalars = dict(rule.step(self, index))
        scalars.update(rule.fixed(self))
        _native.load_ops()
        op = getattr(mx.nd, "gluon_sparse_%s_update" % rule.name)
        op(weight, grad, *_as_list(state), out=weight, rescale_grad=self.rescale_grad, **scalars)

    def update_multi_precision(self, index, weight, grad, state):
        """Update one weight, or several at once (MXNet's aggregated update).

        As MXNet's for one weight, except that every update that is not
        float16 master-copy goes through :meth:`update`. With lists
        (``aggregate_num > 0``: Trainer hands every parameter in one call),
        the dense float32 CPU weights go to ``gluon_sparse_<rule>_multi_update``
        together, the others through :meth:`update` one by one. Steps are
        counted and the rule's scalars computed in the order of ``index``, as
        one-by-one updates would (Nadam's momentum schedule depends on it).
        Ctrl-C waits for the end of the call (the updates happen all or none).
        """
        with _interrupt.held_back():
            if isinstance(index, (list, tuple)):
                self._update_list(index, weight, grad, state)
            else:
                self._update_one(index, weight, grad, state)

    def _update_list(self, index, weight, grad, state):
        rule = self._rule()
        fused = []
        group = self._mxnet_group if self._mxnet_group > 0 else 1
        for start in range(0, len(index), group):
            # As the base class: the group's updates counted before any of its learning
            # rates is read. A weight that missed steps (ignore_stale_grad) then gets the
            # schedule's value at the group's count, not at its own.
            before = self._count_group(index[start:start + group]) if group > 1 else None
            done = []
            try:
                for i, w, g, s in zip(index[start:start + group], weight[start:start + group],
                                      grad[start:start + group], state[start:start + group]):
                    if dense_fusable(rule, w, g, s):
                        self._update_count(i)
                        fused.append((w, g, _as_list(s), rule.step(self, i)))
                    else:
                        self._update_one(i, w, g, s)
                    done.append(i)
            except BaseException:
                if before is not None:  # a refused update is no update
                    deferred.restore_update_counts(self, before, kept=done)
                raise
            finally:
                self._precounted = None
        if fused:
            fused_dense_update(self, rule, fused)

    def _count_group(self, indices):
        """Count ``indices``' updates at once; returns the counts before (to restore)."""
        before = deferred.update_counts(self, indices)
        super()._update_count(list(indices))
        self._precounted = set(indices)
        return before

    def _update_count(self, index):
        if (self._precounted is not None and not isinstance(index, (list, tuple))
                and index in self._precounted):
            self._precounted.discard(index)  # counted with its group (_update_list)
            return
        super()._update_count(index)

    def _update_one(self, index, weight, grad, state):
        if self.multi_precision and weight.dtype == np.float16:
            return super().update_multi_precision(index, weight, grad, state)
        return self.update(index, weight, grad, state)


# ----------------------------------------------------- dense weights in one call
def dense_fusable(rule, weight, grad, state):
    """Whether ``weight`` goes to ``gluon_sparse_<rule>_multi_update``.

    Dense float32 weight and gradient on the CPU, with MXNet's state layout
    (``rule.state_names`` arrays shaped like the weight). Not float64: MXNet's
    composed updates keep some scalars in double where the rules round them to
    float32.
    """
    if isinstance(state, _family_state.DeferredRuleState) or not (
            weight.stype == "default" and grad.stype == "default"
            and np.dtype(weight.dtype) == np.float32
            and weight.context.device_type == "cpu"):
        return False
    states = _as_list(state)
    return (len(states) == len(rule.state_names)
            and all(isinstance(s, mx.nd.NDArray) and s.stype == "default"
                    and s.shape == weight.shape and s.dtype == weight.dtype
                    for s in states))


def fused_dense_update(optimizer, rule, group):
    """One call of ``gluon_sparse_<rule>_multi_update`` for ``group``.

    Parameters
    ----------
    optimizer : mxnet.optimizer.Optimizer
        Gives ``rescale_grad`` and the rule's fixed scalars.
    rule : Rule
    group : list of (weight, grad, states, scalars)
        ``states`` a list of arrays (``rule.state_names``), ``scalars`` what
        ``rule.step`` returned for that weight's update, in update order.
    """
    inputs = []
    for w, g, states, _ in group:
        inputs += [w, g] + states
    # Each step scalar as a list, its elements as the eager operator's text
    # (str(float), as MXNet passes a scalar).
    lists = {name: ",".join(str(scalars[name]) for _, _, _, scalars in group)
             for name in rule.step_names}
    _native.load_ops()
    op = getattr(mx.nd, "gluon_sparse_%s_multi_update" % rule.name)
    op(*inputs, out=[w for w, _, _, _ in group], num_weights=len(group),
       rescale_grad=optimizer.rescale_grad, **lists, **rule.fixed(optimizer))
