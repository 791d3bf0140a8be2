"""The ``swwae`` command (``[project.scripts]``, and ``python -m swwae``): the top layer.

``dispatch`` reads the subcommand and runs the checkout's own program for it (``train.py``, a
script under ``scripts/``), found beside the package (``checkout``); ``runs`` is the one
subcommand of its own, the table of the runs under ``checkpoints/``. Nothing below this layer
imports it, and ``swwae --help`` imports no torch.
"""
