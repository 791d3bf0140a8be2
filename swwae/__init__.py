"""Stacked What-Where Auto-encoders: what-where pooling, bound unpooling, and their training.

``swwae.load(path)`` gives back a trained network as plain torch (``swwae.model.SWWAE``).
The folders are the layers: this package's own modules are pure torch (pooling, the paper's
notation, the model, its loss, projections, pictures, checkpoint files); ``swwae.training``
holds the Lightning/Hydra job around them and ``swwae.bench`` the benchmark harness.
"""

from __future__ import annotations

from pathlib import Path

from swwae import _moved
from swwae.pooling import MODES, Unpool, WhatWherePool, make_pool

_moved.install()  # swwae.module, swwae.data, ... of checkpoints written before 0.2

__all__ = ["MODES", "Unpool", "WhatWherePool", "load", "make_pool"]
__version__ = "0.2.0"


def load(path: str | Path, device: str = "cpu"):
    """The network of a checkpoint written by ``train.py``, as a plain-torch
    :class:`swwae.model.SWWAE` in eval mode on ``device`` (CPU unless asked), with the run
    config it was trained with as ``net.config`` (a dict: ``net.config["model"]``,
    ``net.config["data"]``, ...)::

        net = swwae.load("checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt")
        out = net(x)                                 # out.recon, out.logits, out.whats, out.wheres
        whats, wheres, sizes = net.encode(x)         # features: whats[-1] is the top stage's
        dropped = net.reconstruct_without_where(x)

    Neither Lightning nor Hydra is imported, and nothing in the file can run code (tensors and
    plain values only, ``swwae.checkpoint_file``). A missing, unreadable, corrupt or foreign
    checkpoint raises ``swwae.errors.CheckpointError`` (one line saying what is wrong), as
    ``scripts/evaluate.py`` reports it.
    """
    from swwae.checkpoint_file import network_of, read_checkpoint

    checkpoint = read_checkpoint(path)
    net = network_of(checkpoint, path).to(device).eval()
    net.config = checkpoint["swwae_config"]
    return net
