"""The float32 values MXNet's C++ optimizer operators see for Python scalars.

An MXNet operator gets its float parameters as text (``str(value)``) and
parses them with dmlc-core's ``ParseFloat<float>``, which is fast but not
correctly rounded: digits before the point and the fraction are rounded to
float separately and added, and an exponent is applied by a float division
by a float power of ten. For a Python float below 1e-4 (written with an
exponent) about a quarter of the values come out one float32 step away from
``numpy.float32(value)``; below 1 and at or above 1e-4 the parse is exact.

gluon-sparse's operators parse with ``strtof`` (correctly rounded), so a rule
that must match an MXNet C++ kernel bit for bit (``adamw_update``) passes
:func:`mxnet_float_param` of each scalar: a float32 value, which ``strtof``
reads back unchanged. Python compositions of NDArray operators
(``mx.optimizer.Adamax``, ``Nadam``) do not need this: ``_mul_scalar`` and
friends take a double parameter and cast it, which gives ``numpy.float32``.
"""
import math

import numpy as np

__all__ = ["mxnet_float_param", "dmlc_parse_float32"]

# dmlc::ParseFloat reads at most this many digits after the decimal point.
_MAX_FRACTION_DIGITS = 19
# It clips exponents to float's range.
_MAX_EXPONENT = 38


def _digits(text, pos):
    end = pos
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[pos:end], end


def dmlc_parse_float32(text):
    """``dmlc::ParseFloat<float>(text)``, as MXNet's parameter structs parse a float.

    Parameters
    ----------
    text : str
        A decimal number as Python's ``str(float)`` writes it (``inf`` and
        ``nan`` included).

    Returns
    -------
    numpy.float32
    """
    text = text.strip()
    negative = text.startswith("-")
    body = text[1:] if text[:1] in "+-" else text
    if body.lower() in ("inf", "infinity", "nan"):
        value = np.float32(float(body))
        return -value if negative else value
    whole, pos = _digits(body, 0)
    value = np.float32(int(whole or "0") % 2 ** 64)
    if body[pos:pos + 1] == ".":
        fraction, pos = _digits(body, pos + 1)
        fraction = fraction[:_MAX_FRACTION_DIGITS]
        if fraction:
            # (double)val2 / (double)pow10, cast to float, added in float.
            part = np.float64(int(fraction)) / np.float64(10 ** len(fraction))
            value = np.float32(value + np.float32(part))
    if body[pos:pos + 1] in ("e", "E"):
        pos += 1
        shrink = body[pos:pos + 1] == "-"
        if body[pos:pos + 1] in "+-":
            pos += 1
        exponent, pos = _digits(body, pos)
        exponent = min(int(exponent or "0"), _MAX_EXPONENT)
        scale = np.float32(1.0)
        while exponent >= 8:
            scale = np.float32(scale * np.float32(1e8))
            exponent -= 8
        while exponent > 0:
            scale = np.float32(scale * np.float32(10.0))
            exponent -= 1
        with np.errstate(over="ignore", under="ignore"):
            value = np.float32(value / scale) if shrink else np.float32(value * scale)
    return -value if negative else value


def mxnet_float_param(value):
    """The float an MXNet operator's float parameter holds when given ``value``.

    Parameters
    ----------
    value : float or None
        What the Python optimizer passes to MXNet's operator.

    Returns
    -------
    float or None
        That float32 value as a Python float (None stays None): passed to a
        gluon-sparse operator, it arrives unchanged.
    """
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return value
    return float(dmlc_parse_float32(str(value)))
