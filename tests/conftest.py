"""Fixtures shared by the test modules. Helpers they import live in ``tests/helpers/``
(``helpers.config``: composing the real configs; ``helpers.cli``: the subprocess launcher;
``helpers.faults``: fault-injection callbacks; ``helpers.pooling``, ``helpers.datasets``)."""

from __future__ import annotations

import pytest
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
