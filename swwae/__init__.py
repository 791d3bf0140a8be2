"""Stacked What-Where Auto-encoders: what-where pooling, bound unpooling, and their training."""

from swwae.pooling import MODES, Unpool, WhatWherePool, make_pool

__all__ = ["MODES", "Unpool", "WhatWherePool", "make_pool"]
__version__ = "0.1.0"
