"""Targets of :class:`~gluon_sparse.sklearn.SparseMultiLabelClassifier`: encoding and label order.

``Y`` comes as a scipy sparse or dense indicator matrix, a list of label
lists, or a 1-D array of labels (multi-class). :class:`MultiLabelTargetsMixin`
checks it and turns it into a CSR indicator over ``classes_`` (learning the
classes at fit), learns the order of the output rows (most frequent training
label first, what the log-uniform sampler assumes) and renumbers an indicator's
columns into that order. The network, training and prediction are in
:mod:`gluon_sparse.sklearn.multilabel`.
"""
import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import MultiLabelBinarizer
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import column_or_1d

from .._sparse_entries import first_not_binary, row_of_entry

__all__ = ["MultiLabelTargetsMixin"]

_LABEL_LISTS = (list, tuple, set, frozenset, np.ndarray)
_NO_LABELS = ("Y has no positive label in any row: there is nothing to learn (rows without "
              "labels are allowed, but some row needs one)")


def _abridged(values, limit=10):
    values = list(values)
    return values if len(values) <= limit else values[:limit] + ["..."]


def _check_scalar_labels(labels):
    """Labels are numbers or strings (saved as JSON with the model), not tuples."""
    for label in labels:
        if isinstance(label, _LABEL_LISTS):
            raise ValueError("labels must be numbers or strings; got the %s %r as a label"
                             % (type(label).__name__, label))


def _reads_as_indicator(y):
    """Whether the nested list ``y`` is an indicator matrix: rows of one length holding
    only 0 and 1, not label lists. (``type_of_target`` alone also calls rows of any two
    integers an indicator: ``[[3, 7], [7, 3]]`` are label lists here.)"""
    try:
        if type_of_target(y) != "multilabel-indicator":
            return False
    except (ValueError, TypeError):  # rows of different lengths, labels of mixed types
        return False
    return bool(np.isin(np.asarray(y), (0, 1)).all())


class MultiLabelTargetsMixin:
    """Target encoding of a multi-label estimator.

    Sets the fitted attributes ``classes_``, ``multilabel_``,
    ``label_counts_``, ``label_order_`` and ``labels_per_row_``.
    """

    def _encode_labels(self, y, first_pass, n_samples, drop_unknown=False, classes=None):
        """``Y`` as a CSR indicator in the fitted class order (fit: learn that order).

        Labels not seen at fit are an error, or dropped with ``drop_unknown``
        (scoring: no prediction can hit them). ``classes`` (first
        ``partial_fit``): every label there will ever be.
        """
        if y is None:
            raise ValueError("%s requires y to be passed, but the target y is None"
                             % type(self).__name__)
        if isinstance(y, (list, tuple)) and _reads_as_indicator(y):
            y = np.asarray(y)  # rows of 0/1: an indicator, as scikit-learn reads them
        if not sp.issparse(y) and not isinstance(y, (list, tuple)):
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1:
                y = column_or_1d(y, warn=True)  # a column of labels, as scikit-learn reads it
            if y.ndim == 2 and y.dtype.kind not in "biuf":
                raise ValueError("Y as a 2-D array is a label indicator of 0 and 1 (scikit-learn's "
                                 "convention), but this one holds %s values; give labels as a "
                                 "list of label lists instead" % y.dtype)
            if y.ndim == 2:  # a dense indicator, scikit-learn's multi-label convention
                y = sp.csr_matrix(y)
        if sp.issparse(y):
            # A copy: csr_matrix(y, dtype=...) shares a CSR y's indices and indptr, which
            # eliminate_zeros below would compact under the caller's data.
            Y = sp.csr_matrix(y, dtype=np.float32, copy=True)
            if Y.shape[0] != n_samples:
                raise ValueError("Y has %d rows but X has %d" % (Y.shape[0], n_samples))
            bad = first_not_binary(Y.data)
            if bad is not None:
                raise ValueError("a label indicator Y holds only 0 and 1; row %d has %r for "
                                 "label %d" % (row_of_entry(Y.indptr, bad), float(Y.data[bad]),
                                               Y.indices[bad]))
            columns = np.arange(Y.shape[1])
            if classes is not None and list(classes) != columns.tolist():
                raise ValueError("with an indicator Y the classes are its column indices "
                                 "0..%d; classes=%r names others (pass label lists to name "
                                 "the labels)" % (Y.shape[1] - 1, _abridged(classes)))
            if first_pass:
                self.classes_, self.multilabel_ = columns, True
            elif (Y.shape[1] != len(self.classes_) and drop_unknown
                  and np.array_equal(self.classes_, np.arange(len(self.classes_)))):
                # Scoring an indicator of label ids read from another file, wider or
                # narrower than the model's: ids past the model's are labels it never saw
                # (a miss, as for label lists), and an id it has that the file lacks is
                # an empty column (resize drops the one and pads the other).
                Y.resize((Y.shape[0], len(self.classes_)))
            elif Y.shape[1] != len(self.classes_):
                raise ValueError("Y has %d columns but the model was fitted with %d labels"
                                 % (Y.shape[1], len(self.classes_)))
            Y.eliminate_zeros()
            # A positive stored twice (a non-canonical CSR) is one positive, as in
            # SampledOutput and the metrics: counted once in label_counts_ and the labels
            # a row predicts.
            Y.sum_duplicates()
            Y.data[:] = 1
            if first_pass and Y.nnz == 0:
                raise ValueError(_NO_LABELS)
            return Y
        if len(y) != n_samples:
            raise ValueError("y has %d rows but X has %d" % (len(y), n_samples))
        # Label lists: a list of them, or a 1-D object array (a pandas Series, the labels
        # of LibSVMDataset(multilabel=True)).
        multilabel = (not isinstance(y, np.ndarray) or y.dtype == object) and len(y) > 0 and all(
            isinstance(labels, _LABEL_LISTS) for labels in y)
        if not multilabel:
            y = column_or_1d(y)
            check_classification_targets(y)  # continuous, NaN and inf targets are refused
        rows = [list(labels) for labels in y] if multilabel else [[label] for label in y]
        if first_pass:
            source = rows if classes is None else [list(classes)]
            try:
                binarizer = MultiLabelBinarizer(sparse_output=True).fit(source)
            except TypeError:  # the labels cannot be sorted together
                _check_scalar_labels(label for row in source for label in row)
                kinds = sorted({type(label).__name__ for row in source for label in row})
                raise ValueError("labels must be all numbers or all strings; got labels of "
                                 "the types %s" % ", ".join(kinds)) from None
            if not len(binarizer.classes_):
                raise ValueError(_NO_LABELS)
            _check_scalar_labels(binarizer.classes_)
            # The labels' own dtype (int, str), not the binarizer's object array.
            self.classes_ = np.array(binarizer.classes_.tolist())
            self.multilabel_ = multilabel
        elif classes is not None and not np.array_equal(np.unique(list(classes)), self.classes_):
            raise ValueError("classes=%r is not the same as on the first call (%r)"
                             % (_abridged(np.unique(list(classes)).tolist()),
                                _abridged(self.classes_.tolist())))
        binarizer = MultiLabelBinarizer(classes=self.classes_, sparse_output=True)
        known = set(self.classes_.tolist())
        if drop_unknown:
            rows = [[label for label in row if label in known] for row in rows]
        for row in rows:
            unknown = [label for label in row if label not in known]
            if unknown:
                raise ValueError("y has labels %r that are not among the classes %s"
                                 % (unknown[:10], "seen at fit (a warm start or partial_fit "
                                    "cannot add labels; the first partial_fit's classes= names "
                                    "every label there will be, e.g. classes=range(L) for a "
                                    "file's label ids)" if classes is None
                                    else "passed as classes"))
        return sp.csr_matrix(binarizer.fit_transform(rows), dtype=np.float32)

    def _learn_label_order(self, Y, sample_weight=None):
        """Label frequencies (what the sampler draws by and the output rows' order) and
        labels a row, counted with the sample weights: a row of weight 0 counts as a
        row left out, as scikit-learn's sample_weight means."""
        if sample_weight is None:
            counts = np.asarray(Y.sum(axis=0)).ravel().astype(np.int64)
            self.labels_per_row_ = float(Y.nnz) / max(Y.shape[0], 1)
        else:
            weight = np.asarray(sample_weight, dtype=np.float64)
            counts = np.maximum(Y.T.dot(weight), 0)  # net negative weight: never seen
            self.labels_per_row_ = float(np.diff(Y.indptr).dot(weight) / weight.sum())
        self.label_counts_ = counts.tolist()
        # A list, like the counts: the model directory stores both as JSON.
        self.label_order_ = np.argsort(-counts, kind="stable").tolist()

    def _internal(self, Y):
        """Columns of ``Y`` (class order) renumbered into output rows (frequency order)."""
        rank = np.empty(len(self.classes_), dtype=np.int64)
        rank[np.asarray(self.label_order_)] = np.arange(len(self.classes_))
        Y = sp.csr_matrix((Y.data, rank[Y.indices], Y.indptr), shape=Y.shape)
        Y.sort_indices()
        return Y
