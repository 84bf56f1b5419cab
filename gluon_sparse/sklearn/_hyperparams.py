"""The hyper-parameters every estimator shares, and the one ``__init__`` that stores them.

scikit-learn reads an estimator's parameters from the signature of its
``__init__`` (``get_params``, ``clone``, ``repr``, the estimator checks), and
that ``__init__`` must store each argument unchanged under its own name. The
four estimators share fifteen parameters and differ in two; rather than
writing the same fifteen assignments four times, each family writes one line::

    __init__ = estimator_init(hidden_layer_sizes=(100,), activation="relu")

:func:`estimator_init` builds an ``__init__`` whose signature (the family's own
parameters, positional or keyword, then :data:`COMMON_PARAMETERS`, keyword
only) is a real :class:`inspect.Signature`, so ``help()``, Sphinx and
scikit-learn see the explicit parameter list.

Extension point: a new estimator family (e.g. a multi-label classifier) calls
:func:`estimator_init` with its own parameters (``keyword_only=`` adds more
keyword-only ones after the common ones) and extends
:data:`COMMON_CONSTRAINTS` in its ``_parameter_constraints``.
"""
import inspect
from numbers import Integral, Real

import mxnet as mx
from sklearn.utils._param_validation import Interval, StrOptions

__all__ = ["COMMON_PARAMETERS", "COMMON_CONSTRAINTS", "estimator_init"]

# name -> default, in signature order. The meaning of each is documented in
# the estimators' docstrings (mlp.py, net.py).
COMMON_PARAMETERS = {
    "alpha": 1e-4,
    "batch_size": "auto",
    "learning_rate_init": 1e-3,
    "max_iter": 200,
    "shuffle": True,
    "random_state": None,
    "tol": 1e-4,
    "verbose": False,
    "warm_start": False,
    "early_stopping": False,
    "validation_fraction": 0.1,
    "n_iter_no_change": 10,
    "optimizer": "sparseadam",
    "optimizer_params": None,
    "ctx": "cpu",
}

# scikit-learn's declarative checks of COMMON_PARAMETERS, run by fit.
COMMON_CONSTRAINTS = {
    "alpha": [Interval(Real, 0, None, closed="left")],
    "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
    "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "shuffle": ["boolean"],
    "random_state": ["random_state"],
    "tol": [Interval(Real, 0, None, closed="left")],
    "verbose": ["verbose"],
    "warm_start": ["boolean"],
    "early_stopping": ["boolean"],
    "validation_fraction": [Interval(Real, 0, 1, closed="left")],
    "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
    "optimizer": [str],
    "optimizer_params": [dict, None],
    "ctx": [str, mx.Context],
}


def estimator_init(keyword_only=None, **own):
    """An estimator ``__init__`` that stores its arguments, as scikit-learn requires.

    Parameters
    ----------
    keyword_only : dict, optional
        Further keyword-only parameters (name -> default) after the common ones.
    **own
        The family's own parameters (name -> default), in order: they come
        first and may be passed by position.

    Returns
    -------
    function
        ``__init__(self, <own>, *, <COMMON_PARAMETERS>, <keyword_only>)``; its
        ``__signature__`` lists every parameter with its default.
    """
    keyword_only = dict(keyword_only or {})
    clash = (set(own) | set(keyword_only)) & set(COMMON_PARAMETERS) or set(own) & set(keyword_only)
    if clash:
        raise ValueError("parameters %s are declared twice" % sorted(clash))
    P = inspect.Parameter
    signature = inspect.Signature(
        [P("self", P.POSITIONAL_OR_KEYWORD)]
        + [P(name, P.POSITIONAL_OR_KEYWORD, default=value) for name, value in own.items()]
        + [P(name, P.KEYWORD_ONLY, default=value)
           for name, value in {**COMMON_PARAMETERS, **keyword_only}.items()])

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)  # unchanged, as scikit-learn's contract asks

    __init__.__signature__ = signature
    return __init__

