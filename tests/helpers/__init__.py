"""Helpers shared by several test modules: reference implementations, hypothesis strategies.

``tests/`` is on ``sys.path`` (pytest inserts the rootdir of ``conftest.py``), so test
modules import them as ``from helpers.pooling import ...``.
"""
