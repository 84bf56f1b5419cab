"""The optimizer's state of an estimator, carried through pickling.

scikit-learn's MLPs pickle their optimizer, so that ``partial_fit`` on an
unpickled copy goes on exactly as the original would have. An estimator here
trains with a ``gluon.Trainer``, which is not picklable; its state (the
optimizer object with its step counts, and each parameter's state: Adam's
moments, a deferred optimizer's caught-up rows) is what ``Trainer.save_states``
writes, so a pickle holds those bytes and the next ``partial_fit`` loads them
into the Trainer it builds. Model directories (``save``/``load``) do not keep
them: they are a pickle, which that format exists to avoid.
"""
import os
import tempfile

__all__ = ["trainer_states", "restore_trainer_states"]


def trainer_states(trainer):
    """``Trainer.save_states``'s bytes for ``trainer`` (a deferred optimizer's rows are
    caught up first, as for any save)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "states")
        trainer.save_states(path)
        with open(path, "rb") as f:
            return f.read()


def restore_trainer_states(trainer, states):
    """Load bytes from :func:`trainer_states` into ``trainer`` (built for the same
    parameters, in the same order)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "states")
        with open(path, "wb") as f:
            f.write(states)
        trainer.load_states(path)
