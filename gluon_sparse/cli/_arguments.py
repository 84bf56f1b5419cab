"""argparse ``type=`` functions: each turns one option's text into its value or
raises :class:`argparse.ArgumentTypeError` naming what was expected."""
import argparse


def hidden_sizes(text):
    """``'128,8'`` -> ``(128, 8)``; ``''``, ``'none'`` or ``'linear'`` -> ``()``."""
    text = text.strip()
    if text in ("", "none", "linear"):
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma separated positive integers such as "
                                         "128,8, got %r" % text) from None
    if any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError("hidden layer sizes must be >= 1, got %r" % text)
    return sizes


def positive(kind):
    """A parser of positive numbers of type ``kind`` (int or float)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expected a positive %s, got %r"
                                             % (kind.__name__, text)) from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError("expected a positive %s, got %r"
                                             % (kind.__name__, text))
        return value
    return parse


def non_negative_float(text):
    """A number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number >= 0, got %r" % text) from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("expected a number >= 0, got %r" % text)
    return value


def seed(text):
    """An int in [0, 2**32 - 1], the range of NumPy's and scikit-learn's seeds."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer seed, got %r" % text) from None
    if not 0 <= value <= 2 ** 32 - 1:
        raise argparse.ArgumentTypeError("expected a seed in [0, 4294967295], got %r" % text)
    return value


def fraction(text):
    """A number in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number in [0, 1), got %r" % text) from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError("expected a number in [0, 1), got %r" % text)
    return value


def zero_based(text):
    """``auto``, ``true`` or ``false`` -> ``'auto'``, True or False."""
    choices = {"auto": "auto", "true": True, "false": False}
    if text.strip().lower() not in choices:
        raise argparse.ArgumentTypeError("expected auto, true or false, got %r" % text)
    return choices[text.strip().lower()]


def context(text):
    """``cpu``, ``gpu`` or ``gpu:N``, checked against the GPUs MXNet sees."""
    from ..sklearn import parse_context
    try:
        parse_context(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


# MXNet's Adamax has no epsilon in u: its weights become NaN. (gluon-sparse's
# sparseadamax takes one: train accepts it with --optimizer-param epsilon=...)
ADAMAX_REASON = ("MXNet's Adamax divides by its state u, which stays 0 for the features and "
                 "units no gradient reaches, so their weights become NaN")


def refused_optimizers():
    """``{name: reason}`` of the registered MXNet optimizers ``train`` does not offer: those
    the estimators refuse, and MXNet's Adamax."""
    from ..sklearn._training import UNUSABLE_OPTIMIZERS
    refused = dict(UNUSABLE_OPTIMIZERS)
    refused["adamax"] = ADAMAX_REASON + " (sparseadamax with --optimizer-param epsilon=1e-8 " \
                                        "does not)"
    return refused


def optimizer_names():
    """The MXNet optimizers ``train`` offers and accepts (sorted): every registered one
    (gluon-sparse's too) but :func:`refused_optimizers`."""
    import mxnet as mx

    from .. import optimizer  # noqa: F401  registers 'sparseadam' and the family
    return sorted(set(mx.optimizer.Optimizer.opt_registry) - set(refused_optimizers()))


def optimizer_name(text):
    """One of :func:`optimizer_names`, lower-cased; an error naming them for another."""
    name = text.strip().lower()
    known = optimizer_names()
    if name in known:
        return name
    reason = refused_optimizers().get(name)
    raise argparse.ArgumentTypeError("%s; choose from %s" % (
        "%r cannot train these networks: %s" % (text, reason) if reason
        else "unknown optimizer %r" % text, ", ".join(known)))


def optimizer_param(text):
    """``'momentum=0.9'`` -> ``('momentum', 0.9)``: the value an int, a float, true/false or
    else the text (the estimator checks the name and kind against the optimizer)."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError("expected NAME=VALUE such as momentum=0.9, got %r" % text)
    if value.lower() in ("true", "false"):
        return name, value.lower() == "true"
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value
