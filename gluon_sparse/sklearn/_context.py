"""Turn the estimators' and the command line's ``ctx`` argument into an MXNet context."""
import logging
import re

import mxnet as mx

logger = logging.getLogger(__name__)

__all__ = ["parse_context", "available_context"]

_CTX_PATTERN = re.compile(r"^(cpu|gpu)(?::(\d+))?$")


def parse_context(ctx):
    """Return the :class:`mxnet.Context` that ``ctx`` names.

    Parameters
    ----------
    ctx : str or mxnet.Context
        ``'cpu'``, ``'gpu'`` (GPU 0), ``'gpu:N'`` or a context.

    Raises
    ------
    ValueError
        If the string is malformed or names a GPU that MXNet cannot see.
    """
    if isinstance(ctx, mx.Context):
        device_type, device_id = ctx.device_type, ctx.device_id
    else:
        match = _CTX_PATTERN.match(str(ctx).strip().lower())
        if match is None:
            raise ValueError("ctx must be 'cpu', 'gpu' or 'gpu:N' (or an mxnet.Context), got %r"
                             % (ctx,))
        device_type, device_id = match.group(1), int(match.group(2) or 0)
    if device_type == "gpu":
        n_gpus = mx.context.num_gpus()
        if device_id >= n_gpus:
            raise ValueError("ctx=%r names GPU %d but MXNet sees %d GPU(s)%s"
                             % (ctx, device_id, n_gpus,
                                "" if n_gpus else " (CPU-only MXNet build or no CUDA device)"))
        return mx.gpu(device_id)
    return mx.cpu(device_id)


def available_context(ctx):
    """Like :func:`parse_context`, but a GPU that is not there becomes the CPU.

    Used when a fitted model is loaded (unpickled or read from disk): a model
    trained on a GPU must still predict on a machine without one.
    """
    try:
        return parse_context(ctx)
    except ValueError as err:
        logger.warning("%s; using the CPU instead", err)
        return mx.cpu()
