"""Fixtures shared by the test modules. Helpers they import live in ``tests/helpers/``
(``helpers.config``: composing the real configs; ``helpers.cli``: the subprocess launcher;
``helpers.faults``: fault-injection callbacks; ``helpers.pooling``, ``helpers.datasets``)."""

from __future__ import annotations

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from helpers.cli import kept_logging
from helpers.config import compose_config


@pytest.fixture
def make_config(tmp_path):
    """``make_config(*overrides, quick=True)``: the train config of ``train.py <overrides>``,
    every output under ``tmp_path``."""

    def make(*overrides, quick=True):
        return compose_config(tmp_path, overrides, quick)

    yield make
    GlobalHydra.instance().clear()


@pytest.fixture(autouse=True)
def restore_logging():
    """The logging a command run in the test's process set up goes with the test (``kept_logging``)."""
    with kept_logging():
        yield


@pytest.fixture(autouse=True)
def restore_torch_switches():
    """torch's process-wide switches that a run made in the test's process turned (Lightning's
    Trainer sets deterministic algorithms and cuDNN's autotuning for its run, and leaves them) go
    with the test: a later test in the worker would otherwise meet ``trainer.deterministic=true``'s
    refusal of max unpooling, or pass or fail by the order xdist hands tests out."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
