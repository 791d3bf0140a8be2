"""The ``swwae`` command (``[project.scripts]``, and ``python -m swwae``): the top layer.

Every job is a module here with ``main(argv) -> exit status``, one line each in
``dispatch.SUBCOMMANDS`` (``swwae --help`` lists them); ``dispatch`` reads the subcommand and
imports its module only then, so ``swwae --help`` imports no torch. A clone's ``train.py`` and
``scripts/<job>.py`` are shims over the same modules. Nothing below this layer imports it.
"""
