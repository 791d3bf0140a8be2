"""What the scripts under ``scripts/`` share: argparse that reports a usage error as one line."""

from __future__ import annotations

import argparse

from swwae.errors import ConfigError


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are a ``ConfigError``: a script prints them as its one
    ``error:`` line (exit status 2) like any other bad input, not as usage plus error."""

    def error(self, message):
        raise ConfigError(message)
