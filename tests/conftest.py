"""Suite-wide fixtures."""
import mxnet as mx
import pytest

from gluon_sparse import _native


@pytest.fixture(autouse=True)
def _drop_reported_operator_errors():
    """After each test, drop the error messages the operator library has reported.

    MXNet 1.9.1's lib_api keeps every reported message for good, and each later
    call of the library's operators leaks copies of all of them
    (gluon_sparse/csrc/ops/error_messages.cc): over this suite, whose tests
    provoke hundreds of errors on purpose, that grew the process past 24 GB.
    """
    yield
    if not _native._ops_loaded:
        return
    try:
        mx.nd.waitall()  # no operator may be running while the list is emptied
    except mx.base.MXNetError:
        pass
    _native.clear_error_messages()
