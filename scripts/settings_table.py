"""Write the tables of every setting (the run's top-level ones and its paths, ``swwae.training.run_settings``;
the model's and the data's, ``swwae.settings``; swwae's own callbacks', ``swwae.training.callback_settings``:
name, default, help) into docs/configs.md, between
its ``settings-table`` markers; ``--check`` says whether they are current (exit 1 if not). The tests
run the check, so the page is the schema's.

    python scripts/settings_table.py [--check]
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from swwae.datasets import DATA_SETS
from swwae.loss_terms import TERMS
from swwae.settings import DataSettings, NetworkSettings, TrainingSettings, model_settings, pool_settings
from swwae.training.callback_settings import CALLBACKS
from swwae.training.run_settings import PathSettings, RunSettings

# the tables


def shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def markdown_table(fields: Mapping, section: str) -> str:
    """Settings (name -> pydantic field) as a markdown table: key, default, what it does; the keys
    under ``section`` ("": the top level)."""
    rows = ["| key | default | what it does |", "|---|---|---|"]
    prefix = f"{section}." if section else ""
    rows += [f"| `{prefix}{n}` | `{shown(f.default)}` | {f.description or ''} |" for n, f in fields.items()]
    return "\n".join(rows)


def settings_tables() -> str:
    """Every setting, with its default and help: the run's own (top-level keys, its paths), the model's by kind
    (network, pooling modes' own, training, loss weights), the data's shared ones, each data set's own, then
    each of swwae's callbacks'."""
    model = model_settings().model_fields
    pooling = {n: model[n] for n in pool_settings()}
    weights = {t.weight: model[t.weight] for t in TERMS.values()}
    parts = [
        "### The run (top-level keys)\n\n" + markdown_table(RunSettings.model_fields, ""),
        "### Where it writes\n\n" + markdown_table(PathSettings.model_fields, "paths"),
        "### Model: the network\n\n" + markdown_table(NetworkSettings.model_fields, "model"),
        "### Model: the pooling modes' own settings\n\n" + markdown_table(pooling, "model"),
        "### Model: training\n\n" + markdown_table(TrainingSettings.model_fields, "model"),
        "### Model: the loss terms' weights\n\n" + markdown_table(weights, "model"),
        "### Data: every data set\n\n" + markdown_table(DataSettings.model_fields, "data"),
    ]
    for entry in DATA_SETS.values():
        own = {n: f for n, f in entry.settings.model_fields.items() if n not in DataSettings.model_fields}
        if own:
            parts.append(f"### Data: `{entry.name}`\n\n" + markdown_table(own, "data"))
    for callback in CALLBACKS.values():
        parts.append(
            f"### Callbacks: `{callback.name}`\n\n"
            + markdown_table(callback.settings.model_fields, f"callbacks.{callback.name}")
        )
    return "\n\n".join(parts) + "\n"


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
