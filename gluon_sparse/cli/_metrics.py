"""Held-out metrics of a fitted estimator, computed only where they are defined.

A metric that the data cannot define (AUC with one class in the labels, R^2
of fewer than two samples) is reported as ``n/a`` instead of being computed:
scikit-learn would warn (UndefinedMetricWarning) and return NaN.
"""
import numpy as np

NOT_DEFINED = None


def metrics(model, X, y):
    """An ordered dict of name -> value (``NOT_DEFINED`` where the data cannot define it)."""
    from sklearn.metrics import (accuracy_score, log_loss, mean_squared_error, r2_score,
                                 roc_auc_score)
    if not hasattr(model, "classes_"):
        predicted = model.predict(X)
        return {"mse": mean_squared_error(y, predicted),
                "r2": r2_score(y, predicted) if len(y) >= 2 else NOT_DEFINED}
    if not hasattr(model, "predict_proba"):
        # A classifier that scores each label on its own (SparseMultiLabelClassifier
        # fitted on one label a row): no probabilities for AUC and log loss.
        return {"accuracy": accuracy_score(y, model.predict(X))}
    proba = model.predict_proba(X)
    predicted = model.classes_[proba.argmax(axis=1)]
    result = {"accuracy": accuracy_score(y, predicted)}
    known = np.isin(y, model.classes_)
    # AUC ranks one class against the others: every class of the model must
    # occur among the (known) labels.
    present = np.unique(y[known])
    if len(present) < len(model.classes_):
        result["auc"] = NOT_DEFINED
    elif len(model.classes_) == 2:
        result["auc"] = roc_auc_score(y[known] == model.classes_[1], proba[known, 1])
    else:
        result["auc"] = roc_auc_score(y[known], proba[known], multi_class="ovr",
                                      labels=model.classes_)
    # Labels the model never saw have no probability: log-loss is not defined.
    result["log_loss"] = (log_loss(y, proba, labels=model.classes_) if known.all()
                          else NOT_DEFINED)
    return result


def format_metrics(values):
    """``'accuracy 0.8100  auc n/a'``."""
    return "  ".join("%s %s" % (name, "n/a" if value is NOT_DEFINED else "%.4f" % value)
                     for name, value in values.items())
