"""scikit-learn's estimator-check parametrisation in the form pytest 9 accepts."""
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks


def parametrize_estimator_checks(estimators, expected_failed_checks=None):
    """:func:`sklearn.utils.estimator_checks.parametrize_with_checks`, values as a list.

    scikit-learn hands pytest a generator of (estimator, check) pairs, which
    pytest 9 deprecates (``PytestRemovedIn10Warning``); the same mark with the
    pairs materialised is what pytest keeps supporting.
    """
    mark = parametrize_with_checks(estimators, expected_failed_checks=expected_failed_checks)
    names, values = mark.args
    return pytest.mark.parametrize(names, list(values), **mark.kwargs)
