"""``optimizer_params``: the optimizer's own hyper-parameters, checked before a fit.

The estimators name an MXNet optimizer (``optimizer='sparsesgd'``) and set what
MLPClassifier's parameters mean (the rate from ``learning_rate_init``, weight
decay from ``alpha``, the gradient's scale from the batch); everything else an
optimizer takes (SGD's ``momentum``, Adam's ``beta1``/``beta2``/``epsilon``,
``clip_gradient``, ...) passes through ``optimizer_params`` under MXNet's own
names. They are checked against the optimizer's constructor before training
starts, so a misspelt name is an error naming it, not a crash mid-fit, and
kept to what JSON holds, so a saved model keeps them.
"""
import inspect

import mxnet as mx

__all__ = ["checked_optimizer_params"]

#: Options the estimator sets itself, and the parameter to use instead.
_SET_BY_THE_ESTIMATOR = {
    "learning_rate": "learning_rate_init",
    "wd": "alpha (the L2 penalty)",
    "rescale_grad": "nothing: each step scales by its batch's (weighted) size",
    "param_idx2name": "nothing: the Trainer sets it",
    "param_dict": "nothing: the Trainer sets it",
    "sym": "nothing",
    "lr_scheduler": "nothing: schedules are objects, which a saved model cannot keep",
}

_JSON_SCALARS = (bool, int, float, str, type(None))


def _declared_defaults(cls):
    """``{name: default}`` of the keywords the constructors of ``cls`` and its bases
    declare (the most derived class's default where several do)."""
    defaults = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for name, parameter in inspect.signature(init).parameters.items():
            if (parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
                    and name != "self"):
                defaults.setdefault(name, parameter.default)
    return defaults


def _fits_the_default(value, default):
    """Whether ``value`` has the kind of the declared default: a number where the
    default is a number, a boolean where it is one (MXNet's constructors store
    what they are given: beta1='0.9' would fail only inside the first step)."""
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _estimator_defaults(optimizer, declared):
    """The options the estimators give ``optimizer`` unless ``optimizer_params`` say
    otherwise: ``deferred=True`` for any optimizer of gluon-sparse's family, the
    standard update at lazy cost (updates of rows absent from a batch are replayed
    exactly when the rows are next read); ``lazy_update=False`` for MXNet's own
    optimizers that have a lazy update (``'adam'``, ``'sgd'``, ...): MLPClassifier's
    update is the standard one, and a lazy one leaves the rows of features absent
    from a batch without their L2 penalty (``alpha``) and their momentum."""
    from ..optimizer import supports_deferred
    if supports_deferred(optimizer):
        return {"deferred": True}
    return {"lazy_update": False} if "lazy_update" in declared else {}


def checked_optimizer_params(optimizer, params):
    """The options of a Trainer of ``optimizer`` (a registered name) but its learning
    rate: the estimators' defaults, then ``params``, checked.

    Parameters
    ----------
    optimizer : str
        A registered MXNet optimizer's name (lower case).
    params : dict or None
        The estimator's ``optimizer_params``.

    Returns
    -------
    dict
        ``deferred=True`` where the optimizer takes it (``lazy_update=False`` for
        MXNet's own optimizers that have a lazy update), updated with ``params``.

    Raises
    ------
    ValueError
        For a name the estimator sets itself, a name the optimizer does not take,
        a value that is not a JSON number, string, boolean or None (a saved
        model could not keep it), or values the optimizer's constructor refuses.
    """
    params = {} if params is None else params
    defaults = _declared_defaults(mx.optimizer.Optimizer.opt_registry[optimizer])
    accepted = set(defaults) - set(_SET_BY_THE_ESTIMATOR)
    options = {}
    for name, value in params.items():
        if name in _SET_BY_THE_ESTIMATOR:
            raise ValueError("optimizer_params=%r: %r is set by the estimator; use %s"
                             % (params, name, _SET_BY_THE_ESTIMATOR[name]))
        if not isinstance(name, str) or name not in accepted:
            raise ValueError("optimizer_params=%r: %r is not a parameter of optimizer %r (it "
                             "takes %s)" % (params, name, optimizer, ", ".join(sorted(accepted))))
        if not isinstance(value, _JSON_SCALARS):
            raise ValueError("optimizer_params=%r: the value of %r is a %s; give a number, a "
                             "string, a boolean or None (what a saved model can keep)"
                             % (params, name, type(value).__name__))
        if not _fits_the_default(value, defaults[name]):
            kind = "boolean" if isinstance(defaults[name], bool) else "number"
            raise ValueError("optimizer_params=%r: %r must be a %s (its default is %r), got %r"
                             % (params, name, kind, defaults[name], value))
        options[name] = value
    options = {**_estimator_defaults(optimizer, defaults), **options}
    try:
        # As the Trainer will build it, so that a combination the optimizer refuses
        # (lazy_update=True with deferred) is refused before training.
        mx.optimizer.create(optimizer, **options)
    except (TypeError, ValueError, AssertionError) as err:
        raise ValueError("optimizer_params=%r: optimizer %r refuses them: %s"
                         % (params, optimizer, err)) from None
    return options
