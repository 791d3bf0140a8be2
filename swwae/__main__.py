"""``python -m swwae <subcommand> ...``: the ``swwae`` command (``swwae.commands.dispatch``)."""

from swwae.commands.dispatch import main

if __name__ == "__main__":
    raise SystemExit(main())
