"""``compile=true``: the network trains through ``torch.compile``.

``nn.Module.compile`` compiles the network in place: its state-dict keys stay as they are
(no ``_orig_mod.`` prefix), so the checkpoints of a compiled run are those of an eager one,
and either kind resumes the other. Every pooling mode compiles without a graph break
(``tests/test_compile.py``). Compiling costs time once per graph (training, evaluation, a
smaller last batch); whether it pays depends on the machine (docs/performance.md).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from swwae.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_BACKEND = "inductor"


def compile_backend(setting) -> str | None:
    """The torch.compile backend that ``compile`` asks for: ``false`` none, ``true`` the
    default (inductor), or a backend's name (``aot_eager``: traced, not code-generated)."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return DEFAULT_BACKEND
    backends = torch._dynamo.list_backends(exclude_tags=())
    if not isinstance(setting, str) or setting not in backends:
        raise ConfigError(
            f"compile={setting!r}: write true, false, or a torch.compile backend "
            f"({', '.join(b for b in backends if 'TESTING' not in b)})"
        )
    return setting


def compile_network(module: nn.Module, setting) -> bool:
    """Compile ``module.net`` in place when ``setting`` (the config's ``compile``) asks for it;
    whether it did."""
    backend = compile_backend(setting)
    if backend is None:
        return False
    module.net.compile(backend=backend, dynamic=False)
    log.info("torch.compile: the network compiles (backend %s) on its first batches", backend)
    return True
