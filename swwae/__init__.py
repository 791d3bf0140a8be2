"""Stacked What-Where Auto-encoders: what-where pooling, bound unpooling, and their training.

``swwae.load(path)`` gives back a trained network as plain torch (``swwae.model.SWWAE``)."""

from swwae import _moved
from swwae.pooling import MODES, Unpool, WhatWherePool, make_pool

_moved.install()  # swwae.module, swwae.data, ... of checkpoints written before 0.2

__all__ = ["MODES", "Unpool", "WhatWherePool", "load", "make_pool"]
__version__ = "0.1.0"


def load(path, device="cpu"):
    """The network of a checkpoint written by ``train.py``, as a plain-torch
    :class:`swwae.model.SWWAE` in eval mode on ``device`` (CPU unless asked), with the run
    config it was trained with as ``net.config`` (a dict: ``net.config["model"]``,
    ``net.config["data"]``, ...)::

        net = swwae.load("checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt")
        out = net(x)                                 # out.recon, out.logits, out.whats, out.wheres
        whats, wheres, sizes = net.encode(x)         # features: whats[-1] is the top stage's
        dropped = net.reconstruct_without_where(x)

    A missing, unreadable or foreign checkpoint raises ``swwae.errors.CheckpointError``
    (one line saying what is wrong), as ``scripts/evaluate.py`` reports it.
    """
    from swwae.training.checkpoints import load_model  # imports Lightning: only when a model is loaded

    module, config = load_model(path)
    net = module.net.to(device).eval()
    net.config = config
    return net
