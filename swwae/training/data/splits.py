"""Moved to :mod:`swwae.splits` (pure torch, so that the feature probes draw their label
subsets the same way without importing Lightning); this name keeps importing."""

from swwae.splits import *  # noqa: F401,F403
from swwae.splits import __all__  # noqa: F401
