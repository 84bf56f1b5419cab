"""Prediction: the fitted network (rebuilt on first use after unpickling) and its outputs.

Thread safety: a fitted estimator may be shared by several threads that
predict at once (a web server's workers, joblib's threading backend). The
network is rebuilt from plain arrays on the first use after unpickling or
loading, and a hybridized block's cached graph with static memory is not safe
to run from two threads at once, so both the rebuild and every forward pass
run under the estimator's ``_module_lock`` (an ``RLock`` created by
``_reset_fitted_state``, never pickled). MXNet computes each forward pass on
its own worker threads either way; the lock only orders the calls.

Extension point: a task whose outputs are not one dense row per sample (a
top-k over a huge output layer) adds its own method beside ``_forward``,
taking ``self._module_lock`` the same way.
"""
import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ._data import padded_csr_batches
from ._params import module_param_arrays, set_module_params

__all__ = ["PredictionMixin"]


class PredictionMixin:
    """The fitted block and its forward pass, shared by every estimator."""

    def _is_fitted(self):
        return hasattr(self, "n_outputs_")

    def _architecture(self):
        """The hyper-parameters that the network's structure and function depend on
        (``hidden_layer_sizes``, ``activation``, ``module``, a sampled output layer's
        ``num_sampled``), normalised for comparison."""
        return ()

    def _get_module(self):
        """The fitted block, rebuilt from ``_module_params`` on first use after unpickling,
        and from its own parameters when :meth:`_architecture` changed since it was built."""
        if not self._is_fitted() or not hasattr(self, "_module_lock"):
            raise NotFittedError("This %s instance is not fitted yet. Call 'fit' first."
                                 % type(self).__name__)
        with self._module_lock:
            if self._module is None:
                self._install_params(self._module_params)
            elif getattr(self, "_module_architecture", None) != self._architecture():
                self._rebuild_for_new_architecture()
            return self._module

    def _rebuild_for_new_architecture(self):
        """``set_params`` changed the architecture after fit: the network is rebuilt with the
        trained parameters, as an unpickled copy would be, so that the estimator and its
        copies predict alike (scikit-learn's MLPs read ``activation`` at every predict)."""
        self._install_params(module_param_arrays(self._module))
        # The optimizer's state belonged to the old network's parameters.
        self._trainer = None
        self.__dict__.pop("_pending_optimizer_states", None)

    def _install_params(self, arrays):
        """Build the network with the parameters ``arrays`` (``{name: numpy array}``) now."""
        with self._module_lock:
            module = self._build_module(self.n_outputs_)
            try:
                set_module_params(module, arrays, self._ctx)
            except (AssertionError, ValueError) as err:  # MXNet's shape check is an assert
                raise ValueError("%s: the trained parameters do not fit the network that the "
                                 "hyper-parameters %r describe (%s); set them back to the fitted "
                                 "ones, or fit again" % (type(self).__name__, self._architecture(),
                                                         err)) from err
            # Published only once whole: another thread waiting on the lock
            # then finds it and does not rebuild.
            self._module = module
            self._module_architecture = self._architecture()
            self._module_params = None

    @property
    def module_(self):
        """The fitted :class:`mxnet.gluon.Block`."""
        return self._get_module()

    def _forward(self, X):
        """Network outputs for validated CSR ``X``, as float64 ``(n_samples, n_outputs)``."""
        module = self._get_module()
        with self._module_lock:
            outputs = [module(batch).asnumpy()[:rows]
                       for batch, rows in padded_csr_batches(X, self._ctx)]
        return np.concatenate(outputs).astype(np.float64).reshape(X.shape[0], -1)

    def _raw_predict(self, X):
        check_is_fitted(self, "n_outputs_")
        return self._forward(self._validate_X(X, reset=False))
