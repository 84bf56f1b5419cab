"""``train``'s epoch loop: one line an epoch, and the held-out score that picks the epoch kept.

Wide sparse data is easy to overfit: on a CTR-like set the held-out AUC can peak
after the first epoch and fall after it, while the training loss keeps going
down. So the loop follows one held-out score (:func:`criterion`). With
``--early-stopping N`` it stops once N epochs in a row have not improved on the
best one and puts that epoch's parameters back before the model is saved, as
LightGBM's ``early_stopping_round`` or Keras' ``restore_best_weights`` do.
Without it every epoch runs and the last one is saved, as before; when an
earlier epoch scored better, a warning says so and names the flag.
"""
import collections
import logging
import math
import time

from ._errors import InputError

logger = logging.getLogger("gluon_sparse.cli")

#: The held-out score the epochs are compared on, and whether higher is better.
Criterion = collections.namedtuple("Criterion", ["name", "greater_is_better"])


def criterion(task, labels_known=True):
    """The score that ranks epochs: held-out log loss (accuracy where the held-out data
    has labels the training data has not, log loss being undefined there), mean
    squared error for regression, precision@1 for multi-label models.

    Parameters
    ----------
    task : {'classification', 'regression', 'multilabel'}
    labels_known : bool
        Whether every held-out label occurs in the training labels (classification).
    """
    if task == "regression":
        return Criterion("mse", False)
    if task == "multilabel":
        return Criterion("P@1", True)
    return Criterion("log_loss", False) if labels_known else Criterion("accuracy", True)


def check_early_stopping(args, has_held_out):
    """Refuse ``--early-stopping`` without held-out data, before any work."""
    if args.early_stopping is not None and not has_held_out:
        raise InputError("--early-stopping %d compares epochs on held-out data: give a --test "
                         "file or a --validation-fraction above 0" % args.early_stopping)


def _better(value, best, rule):
    if value is None or math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if rule.greater_is_better else value < best


class _BestParameters:
    """The parameters of the best epoch so far, copied on the model's device.

    One copy of every parameter, refreshed in place: a new best costs a copy,
    never a second set of arrays.
    """

    def __init__(self, model):
        self._model = model
        self._copies = None

    def remember(self):
        if self._copies is None:
            # data() brings deferred rows up to date first (optimizer/_parameter_hooks.py).
            self._copies = self._model._copy_params()
            return
        params = self._model._get_module()._collect_params_with_prefix()
        for name, param in params.items():
            param.data().copyto(self._copies[name])

    def restore(self):
        self._model._restore_params(self._copies)


def describe(epochs_run, kept):
    """``'4 epochs'``, or ``'6 epochs (kept epoch 3)'`` where an earlier epoch was kept."""
    text = "%d epoch%s" % (epochs_run, "" if epochs_run == 1 else "s")
    return text if kept == epochs_run else "%s (kept epoch %d)" % (text, kept)


def run_epochs(args, model, fit_epoch, evaluate, rule, format_values):
    """Train up to ``args.epochs`` epochs, one line each.

    Parameters
    ----------
    args : argparse.Namespace
        ``epochs``, ``early_stopping`` (None or a patience in epochs), ``quiet``.
    model : estimator
        Trained in place; with early stopping, left holding the best epoch's parameters.
    fit_epoch : callable
        ``fit_epoch()`` trains one epoch.
    evaluate : callable or None
        ``evaluate()`` returns the held-out metrics (a dict holding ``rule.name``);
        None where there is no held-out data.
    rule : Criterion or None
        The score ranking the epochs (None without held-out data).
    format_values : callable
        Formats a metrics dict for the epoch lines.

    Returns
    -------
    values : dict
        The kept epoch's metrics (``loss`` is that epoch's training loss).
    epochs_run : int
    kept : int
        The epoch (1-based) whose parameters the model holds.
    """
    from tqdm.auto import tqdm
    # disable=None: a bar on terminals only, not in logs and pipes.
    progress = tqdm(range(args.epochs), desc="train", unit="epoch",
                    disable=True if args.quiet else None)
    best = _BestParameters(model) if args.early_stopping is not None else None
    best_value = best_epoch = best_values = None
    values, epoch = {}, 0
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        fit_epoch()
        seconds = time.perf_counter() - start
        values = {"loss": model.loss_}
        if evaluate is not None:
            values.update(evaluate())
        progress.update()
        progress.set_postfix({name: "n/a" if value is None else "%.4f" % value
                              for name, value in values.items()})
        tqdm.write("epoch %d/%d  %s  (%.2f s)" % (epoch, args.epochs, format_values(values),
                                                   seconds))
        if rule is None:
            continue
        if _better(values.get(rule.name), best_value, rule):
            best_value, best_epoch, best_values = values[rule.name], epoch, values
            if best is not None:
                best.remember()
        elif best is not None and best_epoch is not None and \
                epoch - best_epoch >= args.early_stopping:
            tqdm.write("early stopping: held-out %s has not improved for %d epoch%s; keeping "
                       "epoch %d (%s %.4f)" % (rule.name, epoch - best_epoch,
                                              "" if epoch - best_epoch == 1 else "s",
                                              best_epoch, rule.name, best_value))
            break
    progress.close()
    model.n_iter_ = epoch  # one fit's epochs (partial_fit counts its own call only)
    if best_epoch is None or best_epoch == epoch:
        return values, epoch, epoch
    if best is not None:
        best.restore()
        return best_values, epoch, best_epoch
    last = values.get(rule.name)
    if last == best_value:
        return values, epoch, epoch  # a tie: the epoch saved is as good as the best
    logger.warning("held-out %s was best at epoch %d (%.4f; %s at epoch %d): the model saved "
                   "is the last epoch's; --early-stopping N keeps the best epoch's",
                   rule.name, best_epoch, best_value, "n/a" if last is None else "%.4f" % last,
                   epoch)
    return values, epoch, epoch
