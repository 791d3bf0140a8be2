"""The shipped Hydra configs: ``train.yaml`` and its groups, the package ``swwae.configs``.

In a clone they sit at the top, in ``configs/``; an install (a wheel, or ``pip install -e .``)
maps that folder to ``swwae.configs``, so Hydra reads them as ``pkg://swwae.configs`` wherever
the package is (``swwae.training.composing`` says so, in one place). No Python lives here.
"""
