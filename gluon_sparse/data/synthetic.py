"""Synthetic sparse data sets, generated in memory (nothing is downloaded).

:func:`make_reference_dataset` is the project's reference workload: 1000
samples x 1,000,000 features at density 1e-5 (about 10 non-zeros a row), with
a planted linear signal in the labels. It is what ``gluon-sparse train`` trains
on when it is given no data, and what the benchmarks call "the reference
dataset".
"""
import numpy as np
import scipy.sparse as sp

__all__ = ["make_reference_dataset"]


LABEL_RULES = ("linear", "row_sum")


# The last cells of a nearly full matrix are drawn uniformly (see the loop below),
# where the matrix is small enough to list its free cells.
_FILL_FRACTION = 0.05
_FILL_CELLS = 50_000_000


def make_reference_dataset(n_samples=1000, n_features=1_000_000, density=1e-5, feature_skew=1.2,
                           random_state=0, dtype=np.float32, label_rule="linear",
                           n_informative=1000):
    """Generate the reference sparse binary classification data set.

    Every non-zero sits in a uniformly drawn row; its column is drawn from a
    power law (Zipf with exponent ``feature_skew``) over a random permutation
    of the features, as word and click-feature frequencies are in real text
    and CTR data. The skew is what makes the task learnable from a thousand
    samples: with uniform columns (``feature_skew=0``) almost every feature
    occurs once, so nothing learned about it carries over to new rows and
    any model scores at chance on held-out data. Values are uniform in
    ``(0, 1]``.

    The labels follow ``label_rule``. ``'linear'`` (the default) plants a
    linear signal in the ``n_informative`` most frequent features, as in
    click data where common features carry the signal and the long tail is
    noise: each of them gets a hidden weight drawn from N(0, 1) (every other
    feature 0), and a row is labelled 1 when its score ``X @ w`` is above
    the median score (balanced classes: rows tied at the median are split
    at random). With the defaults about 80% of the
    non-zeros fall on informative features, each seen many times in a
    thousand rows, so a model's held-out accuracy climbs over the epochs (to
    about 0.85 with ``gluon-sparse train``'s defaults). ``'row_sum'`` is the
    rule of gluon-sparse 0.1 (``row sum > mean row sum``), a weak signal
    that 800 training rows learn only to about 0.7 before overfitting; it is
    kept so that figures made with it can be reproduced. ``X`` does not
    depend on the rule.

    Parameters
    ----------
    n_samples : int, default 1000
        Number of rows.
    n_features : int, default 1,000,000
        Number of columns.
    density : float, default 1e-5
        Fraction of non-zero entries (exactly ``round(n_samples * n_features
        * density)`` distinct ones).
    feature_skew : float, default 1.2
        Zipf exponent of the column frequencies; 0 draws columns uniformly.
    random_state : int, default 0
        Seed; the same seed gives the same data on every platform.
    dtype : numpy dtype, default float32
        dtype of the values.
    label_rule : {'linear', 'row_sum'}, default 'linear'
        How the labels derive from ``X`` (see above).
    n_informative : int, default 1000
        Number of features (the most frequent ones) that carry the planted
        signal of ``label_rule='linear'``.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Sorted indices, no duplicates.
    y : numpy.ndarray of int64, shape (n_samples,)
        0 or 1, by ``label_rule``.

    Examples
    --------
    >>> from gluon_sparse.data import make_reference_dataset
    >>> X, y = make_reference_dataset()
    >>> X.shape, X.nnz
    ((1000, 1000000), 10000)
    """
    if n_samples < 1 or n_features < 1:
        raise ValueError("n_samples and n_features must be >= 1, got %r and %r"
                         % (n_samples, n_features))
    if not 0 < density <= 1:
        raise ValueError("density must be in (0, 1], got %r" % (density,))
    if label_rule not in LABEL_RULES:
        raise ValueError("label_rule must be one of %s, got %r" % (LABEL_RULES, label_rule))
    if n_informative < 1:
        raise ValueError("n_informative must be >= 1, got %r" % (n_informative,))
    if feature_skew < 0:
        raise ValueError("feature_skew must be >= 0, got %r" % (feature_skew,))
    nnz = max(1, int(round(n_samples * n_features * density)))
    rng = np.random.default_rng(random_state)
    if feature_skew:
        ranks = np.arange(1, n_features + 1, dtype=np.float64)
        cumulative = np.cumsum(ranks ** -feature_skew)
        cumulative /= cumulative[-1]
        feature_by_rank = rng.permutation(n_features)
    chosen_rows = np.empty(0, dtype=np.int64)
    chosen_cols = np.empty(0, dtype=np.int64)
    # Draw (row, column) pairs until `nnz` distinct ones exist; popular
    # columns repeat within a row, and a repeat must not lower the density.
    while chosen_rows.size < nnz:
        if chosen_rows.size and nnz - chosen_rows.size < _FILL_FRACTION * nnz \
                and n_samples * n_features <= _FILL_CELLS:
            # Near density 1 the skewed draws almost only hit chosen cells (10 x 1000
            # at density 1 took a minute): the last few cells are drawn uniformly
            # from those still free.
            taken = chosen_rows * n_features + chosen_cols
            free = np.setdiff1d(np.arange(n_samples * n_features), taken, assume_unique=True)
            extra = rng.choice(free, nnz - chosen_rows.size, replace=False)
            chosen_rows = np.concatenate([chosen_rows, extra // n_features])
            chosen_cols = np.concatenate([chosen_cols, extra % n_features])
            break
        draw = 2 * (nnz - chosen_rows.size) + 16
        rows = rng.integers(0, n_samples, draw)
        if feature_skew:
            # Inverse-CDF sampling of the ranks (what rng.choice(p=...) does, minus its checks).
            ranks_drawn = np.minimum(np.searchsorted(cumulative, rng.random(draw), side="right"),
                                     n_features - 1)
            cols = feature_by_rank[ranks_drawn]
        else:
            cols = rng.integers(0, n_features, draw)
        rows = np.concatenate([chosen_rows, rows])
        cols = np.concatenate([chosen_cols, cols])
        _, first = np.unique(rows * n_features + cols, return_index=True)
        keep = np.sort(first)[:nnz]  # first occurrences, in draw order
        chosen_rows, chosen_cols = rows[keep], cols[keep]
    values = rng.random(nnz).astype(dtype)
    values = np.where(values == 0, np.dtype(dtype).type(1), values)  # (0, 1]: a stored entry is never zero
    X = sp.csr_matrix((values, (chosen_rows, chosen_cols)), shape=(n_samples, n_features))
    X.sort_indices()
    if label_rule == "row_sum":
        row_sums = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        return X, (row_sums > row_sums.mean()).astype(np.int64)
    # Drawn after X, from the same generator: X is the same under either rule.
    informative = min(n_informative, n_features)
    if not feature_skew:
        feature_by_rank = rng.permutation(n_features)
    weights = np.zeros(n_features)
    weights[feature_by_rank[:informative]] = rng.standard_normal(informative)
    scores = X.astype(np.float64) @ weights
    # The top half by score (the rows above the median). Rows tied at the median
    # (those without an informative feature score 0) are split at random, drawn
    # last, so that the classes stay balanced; without such ties this is
    # `scores > median` exactly.
    order = np.lexsort((rng.random(n_samples), scores))
    y = np.zeros(n_samples, dtype=np.int64)
    y[order[n_samples - n_samples // 2:]] = 1
    return X, y
