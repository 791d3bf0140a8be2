"""The ``swwae`` command (``[project.scripts]``, and ``python -m swwae``): the top layer.

Every job is a module here with ``main(argv) -> exit status``: ``train`` (the Hydra entry
point), ``evaluate``, ``export``, ``probe``, ``project``, ``compare``, ``runs``, the studies'
reports (``feature_study``, ``semi_map``) and ``device_check``; ``dispatch`` reads the
subcommand and imports its module only then, so ``swwae --help`` imports no torch. A clone's
``train.py`` and ``scripts/<job>.py`` are shims over the same modules. Nothing below this layer
imports it.
"""
