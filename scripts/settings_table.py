"""Write the tables of every model and data setting (``swwae.settings``: name, default, help)
into docs/configs.md, between its ``settings-table`` markers; ``--check`` says whether they are
current (exit 1 if not). The tests run the check, so the page is the schema's.

    python scripts/settings_table.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from swwae.settings import settings_tables

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configs.md"
BEGIN, END = "<!-- settings-table: begin (scripts/settings_table.py) -->", "<!-- settings-table: end -->"


def written(page: str) -> str:
    """The page with the tables of the schema between its markers."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{settings_tables()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text()
    if BEGIN not in page or END not in page:
        print(f"error: {PAGE} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 2
    if "--check" in argv:
        current = written(page) == page
        print(f"{PAGE.name}: {'current' if current else 'stale: run python scripts/settings_table.py'}")
        return 0 if current else 1
    PAGE.write_text(written(page))
    print(f"wrote the settings tables into {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
