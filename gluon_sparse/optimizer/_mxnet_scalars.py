"""The values MXNet's operators actually use for Python float hyper-parameters.

MXNet passes every operator argument as text (``str(value)``) and its
parameter structs parse it with dmlc-core's ``ParseFloat``, which is fast but
not correctly rounded: the integer part, the fraction (at most 19 digits,
divided in double) and the power of ten (built by repeated multiplication)
are combined with a rounding at each step. For a ``float`` field (``lr``,
``wd``, ``clip_gradient`` of ``ftrl_update``, ...) about one value in four
written with an exponent (``4.05e-05``) parses to a float32 one unit off the
nearest one, which ``np.float32(value)`` or C's ``strtof`` give.

The family's operators parse their float fields with dmlc's own parser
(csrc/ops/op_attrs.h), so a rule that passes MXNet's text gets MXNet's value.
These Python models serve where Python must know that value itself:
:func:`param_float` (a float field, e.g. to decide whether an FTRL step is
odd, see sparse_ftrl.py) and :func:`scalar_float32` (the float32 operand of a
scalar op such as ``weight * wd``, which parses a double and casts it: what
AdaGrad's dense path uses, see sparse_adagrad.py). Both are checked against
MXNet's own parse in tests/test_optimizer_ftrl.py.
"""
import math

import numpy as np

__all__ = ["param_float", "scalar_float32"]

_MAX_FRACTION_DIGITS = 19  # dmlc::kStrtofMaxDigits


def _parse(text, ftype):
    """dmlc::ParseFloat<ftype> of ``text`` (decimal notation, as Python prints floats)."""
    text = text.strip()
    negative = text.startswith("-")
    body = text.lstrip("+-").lower()
    if body.startswith("inf"):
        value = ftype(math.inf)
    elif body.startswith("nan"):
        return ftype(math.nan)
    else:
        mantissa, _, exponent = body.partition("e")
        whole, _, fraction = mantissa.partition(".")
        value = ftype(int(whole or "0") % 2 ** 64)
        if fraction:
            digits = fraction[:_MAX_FRACTION_DIGITS]
            value = ftype(value + ftype(float(int(digits)) / float(10 ** len(digits))))
        if exponent:
            power = abs(int(exponent))
            scale = ftype(1.0)
            while power >= 8:
                scale = ftype(scale * ftype(1e8))
                power -= 8
            while power > 0:
                scale = ftype(scale * ftype(10.0))
                power -= 1
            value = ftype(value / scale) if exponent.startswith("-") else ftype(value * scale)
    return -value if negative else value


def param_float(value):
    """The float32 an MXNet ``float`` operator parameter holds for ``value``, as a Python float.

    Passing the result (whose repr is exact) to an operator that parses with a
    correctly rounded ``strtof`` gives that same float32.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return float(_parse(str(value), np.float32))


def scalar_float32(value):
    """The float32 an MXNet scalar op (``x * value`` on a float32 NDArray) multiplies by.

    The op parses ``value`` as a double (dmlc's ParseFloat<double>) and casts
    it to the array's type.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.float32(_parse(str(value), np.float64)))
