"""Fixtures shared by the test modules. Helpers they import live in ``tests/helpers/``
(``helpers.config``: composing the real configs; ``helpers.cli``: the subprocess launcher;
``helpers.faults``: fault-injection callbacks; ``helpers.pooling``, ``helpers.datasets``)."""

from __future__ import annotations

import pytest
from hydra.core.global_hydra import GlobalHydra

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
    """The logging set up by a command run in the test's process (Hydra's job logging: handlers
    on the test's captured stderr) goes with the test: a later test's warning would otherwise be
    written to a closed stream, as Python's "--- Logging error ---" traceback."""
    import logging

    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    saved = {logger: (list(logger.handlers), logger.level, logger.propagate) for logger in loggers}
    yield
    for logger, (handlers, level, propagate) in saved.items():
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
