"""All-pairs covering of a parameter grid, for the optimizers' MXNet test grids.

MXNet's own optimizer tests run the full product of their axes (dtype x clip x
rescale x wd x ...: 72-144 cases each); run against every optimizer of the family, eager and
deferred, the products alone would take several minutes of the suite. Faults in an update's
arithmetic show up through one value or an interaction of two (clip with rescale, wd with a
dtype), so the tests run a subset in which every pair of values of any two axes occurs in at
least one case: the classic all-pairs design, a sixth to a tenth of the product here.
"""
import itertools

__all__ = ["pairwise"]


def pairwise(*axes):
    """Cases (tuples, one value per axis) covering every pair of values of any two axes.

    Greedy and deterministic: among the product's cases, repeatedly take the one that
    covers the most pairs not covered yet (ties: the first in product order).

    Parameters
    ----------
    *axes : sequences
        The values of each axis.

    Returns
    -------
    list of tuple
    """
    axes = [list(axis) for axis in axes]
    cases = list(itertools.product(*axes))
    if len(axes) < 2:
        return cases

    def pairs(case):
        return {(i, case[i], j, case[j]) for i, j in itertools.combinations(range(len(case)), 2)}

    uncovered = set().union(*(pairs(case) for case in cases))
    chosen = []
    while uncovered:
        best = max(cases, key=lambda case: len(pairs(case) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen
