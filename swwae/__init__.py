"""Stacked What-Where Auto-encoders: what-where pooling, bound unpooling, and their training.

``swwae.load(path)`` gives back a trained network as plain torch (``swwae.model.SWWAE``).
The folders are the layers: this package's own modules are pure torch (pooling, the paper's
notation, the model, its loss, projections, pictures, checkpoint files); ``swwae.training``
holds the Lightning/Hydra job around them, ``swwae.bench`` the benchmark harness and
``swwae.commands`` the ``swwae`` command. ``import swwae`` imports nothing (no torch, no other
swwae module) until a name that needs it is used: ``import swwae.pooling`` loads the pooling alone.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MODES", "Unpool", "WhatWherePool", "load", "make_pool", "save_pretrained"]
POOLING_NAMES = ("MODES", "Unpool", "WhatWherePool", "make_pool")


def __getattr__(name: str):
    """``swwae.WhatWherePool`` and the other pooling names (and ``swwae.pooling``) import the
    pooling, and so torch, when first used (PEP 562): ``import swwae``, and the ``swwae``
    command's start, stay cheap, and ``swwae.threads`` can set OpenMP's settings before torch
    loads (they are read once, when its OpenMP runtime starts). ``swwae.__version__`` reads
    ``swwae.version`` when asked: a parent package imports before any of its modules, and
    ``swwae.pooling`` is lifted into other code alone."""
    if name == "__version__":
        from swwae.version import __version__

        return __version__
    if name in POOLING_NAMES or name == "pooling":
        import swwae.pooling

        return swwae.pooling if name == "pooling" else getattr(swwae.pooling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, the lazy ones too (tab completion), and the module's own dunders."""
    return sorted({*(name for name in globals() if name.startswith("__")), *__all__, "pooling", "__version__"})


def load(path: str | Path, device: str = "cpu"):
    """The network of a checkpoint written by ``train.py``, or of a model folder (its
    ``config.json`` + ``model.safetensors``, ``swwae.save_pretrained``), as a plain-torch
    [`swwae.model.SWWAE`][swwae.model.SWWAE] in eval mode on ``device`` (CPU unless asked), with
    the run config it was trained with as ``net.config`` (a dict: ``net.config["model"]``,
    ``net.config["data"]``, ...).

    Example:
        ```python
        net = swwae.load("checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt")   # or a folder: "m/"
        out = net(x)                                 # out.recon, out.logits, out.whats, out.wheres
        whats, wheres, sizes = net.encode(x)         # features: whats[-1] is the top stage's
        dropped = net.reconstruct_without_where(x)
        ```

    Neither Lightning nor Hydra is imported, and nothing in the files can run code (tensors and
    plain values only, ``swwae.checkpoint_file``; safetensors and JSON, ``swwae.pretrained``). A
    missing, unreadable, corrupt or foreign checkpoint or folder raises
    ``swwae.errors.CheckpointError`` (one line saying what is wrong), as ``scripts/evaluate.py``
    reports it.
    """
    from swwae.plugins import load_plugins
    from swwae.pretrained import CONFIG_FILE, WEIGHTS_FILE

    load_plugins()  # a network may use a lab's own pooling mode (swwae.plugins)

    path = Path(path)
    if path.is_dir() or (path.name in (CONFIG_FILE, WEIGHTS_FILE) and path.parent.is_dir()):
        from swwae.model import SWWAE

        return SWWAE.from_folder(path if path.is_dir() else path.parent, device=device)
    from swwae.checkpoint_file import network_of, read_checkpoint
    from swwae.errors import Unreadable

    if path.suffix != ".ckpt" and not (path.exists() or path.is_symlink()):  # a folder as likely as a file
        raise Unreadable(f"{path} does not exist: it is neither a model folder nor a checkpoint")
    checkpoint = read_checkpoint(path)
    net = network_of(checkpoint, path).to(device).eval()
    net.config = checkpoint["swwae_config"]
    return net


def save_pretrained(net, folder: str | Path, *, config: dict | None = None, metrics=None) -> Path:
    """Write ``net`` (a [`swwae.model.SWWAE`][swwae.model.SWWAE], e.g. from ``swwae.load``) as a
    model folder that ``swwae.load(folder)`` reads back with bit-identical outputs, and the Hugging
    Face Hub takes as it is (``swwae.hub``).

    Example:
        ```python
        swwae.save_pretrained(swwae.load("checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt"), "m/")
        ```

    ``folder/config.json``: the network's settings, the data's image shape and classes, the run
    config (``config``, default ``net.config``) and the project version;
    ``folder/model.safetensors``: the weights, no pickle; ``folder/README.md``: the model card
    (``swwae.card``), with the test metrics ``metrics`` (a ``swwae.card.RunMetrics``; default:
    those of the run's ``metrics.json``, when it is found and measured these very weights: a
    network of ``last.ckpt``, or one trained on since, gets none of ``best.ckpt``'s). Returns
    the folder.
    """
    from swwae.pretrained import Pretrained

    if not isinstance(net, Pretrained):
        raise TypeError(
            f"save_pretrained takes a swwae network (swwae.model.SWWAE), not {type(net).__name__}"
            + ("; pass its .net" if isinstance(getattr(net, "net", None), Pretrained) else "")
        )
    return net.save_pretrained(folder, config=config, metrics=metrics)
