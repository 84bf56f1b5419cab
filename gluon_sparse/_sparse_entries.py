"""Finding the first bad entry of an index or CSR array, and the row it is in.

The checks that refuse bad input name where it is: the row of a CSR entry, the
first id outside a weight, the first indicator value that is not 0 or 1. They
run on host copies of the arrays (NumPy); each returns the first offending
position, or None.
"""
import numpy as np

__all__ = ["row_of_entry", "first_outside", "first_not_binary"]


def row_of_entry(indptr, position):
    """The row whose entries (``indptr[row] <= position < indptr[row + 1]``) hold ``position``."""
    return int(np.searchsorted(indptr, position, side="right")) - 1


def first_outside(ids, size):
    """Position of the first id outside ``[0, size)``, or None."""
    bad = np.flatnonzero((ids < 0) | (ids >= size))
    return int(bad[0]) if bad.size else None


def first_not_binary(values):
    """Position of the first value that is neither 0 nor 1 (NaN included), or None."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    return int(bad[0]) if bad.size else None
