"""Every example in the package's docstrings runs and prints what it shows (doctest).

The examples are what the API reference shows; two classifiers' examples had
stopped running (one class only) without a test noticing.
"""
import doctest
import importlib
import pkgutil

import pytest

import gluon_sparse
from gluon_sparse.optimizer import _parameter_hooks


def _modules():
    names = ["gluon_sparse"]
    for info in pkgutil.walk_packages(gluon_sparse.__path__, "gluon_sparse."):
        if ".csrc" not in info.name:
            names.append(info.name)
    return names


# The hooks on MXNet's methods carry MXNet's own docstrings (help() shows them),
# whose examples are MXNet's fragments, not runnable here.
_MXNET_DOCSTRINGS = {hook.__name__ for _, _, hook in _parameter_hooks._HOOKS}


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(module, name):
        if test.examples and test.name.rsplit(".", 1)[-1] not in _MXNET_DOCSTRINGS:
            runner.run(test, out=lambda text: None)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "%d of %d examples in %s failed: run python -m pytest " \
        "--doctest-modules %s" % (results.failed, results.attempted, name, module.__file__)
