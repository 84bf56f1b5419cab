"""Running marks a rule writes into every history record, so that its C++
``replay_row`` hook decides in O(1) whether a range of steps (from, to] has a
property, instead of scanning the range's records for every row it replays.

A record is float32. :func:`last_step_where` stores the update count of the
latest step with a property rounded *up* to float32, so that the hook's test
``mark(to) <= from`` stays exact beyond 2**24 steps (it can only err towards
"there was such a step", which makes the hook fall back on the step-by-step
replay). :func:`running_max` keeps the largest value so far (an upper bound
over any range ending at the current step).

The marks live on the optimizer (pickled with it by ``Trainer.save_states``),
keyed by rule and weight index, so a history and its marks come from the same
optimizer.
"""
import numpy as np

__all__ = ["last_step_where", "running_max"]


def _marks(optimizer):
    return optimizer.__dict__.setdefault("_gluon_sparse_replay_marks", {})


def _float32_up(value):
    """The smallest float32 >= ``value``, as a Python float."""
    rounded = np.float32(value)
    if float(rounded) < value:
        rounded = np.nextafter(rounded, np.float32(np.inf))
    return float(rounded)


def last_step_where(optimizer, key, index, holds, step=None):
    """The last update of weight ``index`` (this one included) at which ``holds`` was
    true, 0 if none, rounded up to float32.

    Call once per update, after ``optimizer._update_count(index)``. ``step``: this
    update's number in the deferred history (default: the optimizer's count).
    """
    marks = _marks(optimizer)
    if holds:
        marks[(key, index)] = optimizer._index_update_count[index] if step is None else step
    return _float32_up(marks.get((key, index), 0))


def running_max(optimizer, key, index, value):
    """The largest ``value`` seen for weight ``index`` so far (NaN is ignored)."""
    marks = _marks(optimizer)
    best = marks.get((key, index))
    if value == value and not (best is not None and best >= value):
        marks[(key, index)] = best = value
    return value if best is None else best
