"""Summarise a sweep folder again: summary.md (a table, mean ± std over seeds per config)
and summary.png, the same files the sweep wrote at its end.

    python scripts/compare_runs.py multirun/2026-01-01_12-00-00
    python scripts/compare_runs.py <sweep dir> --recon            # + reconstructions.png
    python scripts/compare_runs.py <sweep dir> --recon docs/pool_size.png --num-images 6
    python scripts/compare_runs.py <sweep dir> --reference "paper=100:11.7,600:5.3,1000:4.0,3000:2.7"

--recon also assembles one figure of reconstructions, one panel per config (its first
finished seed's best checkpoint, rows input | reconstruction | reconstruction with the
where dropped); with a numeric override such as model.pool_size the panels form a grid over
it. --reference LABEL=x:y,... draws published error % (a dashed line) on the error panel over
the numeric axis, e.g. a paper's figures against the number of labels. Exit status: 0, or 1
when a job of the sweep failed (the summary is written anyway), or 2 for a bad folder.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import warnings
from pathlib import Path

from swwae.cli import one_line_errors, script_parser
from swwae.training.sweep import reconstruction_figure, write_summary


def reference(text: str) -> tuple[str, dict[float, float]]:
    """'LABEL=x:y,x:y' -> (LABEL, {x: y})."""
    label, _, points = text.rpartition("=")
    try:
        series = {float(x): float(y) for x, y in (p.split(":") for p in points.split(","))}
    except ValueError:
        series = {}
    if not label or not series:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=x:y,x:y,... e.g. 'paper=100:11.7,600:5.3'")
    return label, series


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--recon",
        nargs="?",
        const="",
        default=None,
        metavar="PNG",
        help="also write a reconstruction figure (default: <sweep dir>/reconstructions.png)",
    )
    parser.add_argument("--num-images", type=int, default=6)
    parser.add_argument("--split", choices=["val", "test"], default="test")
    parser.add_argument(
        "--reference",
        type=reference,
        action="append",
        default=[],
        metavar="LABEL=x:y,...",
        help="published error %% over the numeric axis, drawn dashed (repeatable)",
    )
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    summary = write_summary(args.sweep_dir, references=dict(args.reference))
    print((args.sweep_dir / "summary.md").read_text(), end="")
    if args.recon is not None:
        out = Path(args.recon) if args.recon else args.sweep_dir / "reconstructions.png"
        print(f"reconstructions: {reconstruction_figure(summary, out, args.num_images, args.split)}")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
