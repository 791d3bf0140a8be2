"""Summarise a sweep folder again: summary.md (a table, mean ± std over seeds per config)
and summary.png, the files the sweep wrote into its folder at its end, written here into the
current folder (or --out: a folder, or a prefix for its .md and .png), never into the sweep
folder (which may be read-only, or another user's).

    swwae compare multirun/2026-01-01_12-00-00
    swwae compare <sweep dir> --out results/                      # results/summary.md, .png
    swwae compare <sweep dir> --recon                             # + ./reconstructions.png
    swwae compare <sweep dir> --recon docs/pool_size.png --num-images 6
    swwae compare <sweep dir> --reference "paper=100:11.7,600:5.3,1000:4.0,3000:2.7"

--recon also assembles one figure of reconstructions, one panel per config (its first
finished seed's best checkpoint, rows input | reconstruction | reconstruction with the
where dropped); with a numeric override such as model.pool_size the panels form a grid over
it. A checkpoint is read only from the sweep folder or --checkpoints (the folder train.py
wrote them into: ./checkpoints unless paths.checkpoint_dir said otherwise); one a record names
elsewhere is left out, in one line, before it is opened. --reference LABEL=x:y,... draws
published error % (a dashed line) on the error panel over the numeric axis, e.g. a paper's
figures against the number of labels; a sweep without such an axis, or without a test
error, has nowhere to draw it: one error line. Exit status: 0, or 1 when a job of the sweep
failed (the summary is written anyway), or 2 for bad input.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import warnings
from pathlib import Path

from swwae.cli import add_checkpoint_folders, count, one_line_errors, script_parser
from swwae.commands.outputs import picture_path, report_file, report_prefix, writing
from swwae.errors import ConfigError
from swwae.install import command
from swwae.training.sweep import (
    collect,
    markdown,
    numeric_axis,
    reconstruction_figure,
    sweeps_inside,
    write_summary_files,
)


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


def check_references(summary, references: list) -> None:
    """ConfigError when the summary's figure has nowhere to draw ``--reference``: it is drawn on
    the test (or val) error panel over a numeric swept override."""
    if not references:
        return
    if numeric_axis(summary) is None:
        raise ConfigError(
            "--reference draws published error % over a numeric swept override (data.num_labels, "
            f"model.pool_size...); {summary.folder} sweeps none"
        )
    if not any(m.endswith("/error_pct") for m in summary.columns):
        raise ConfigError(
            f"--reference draws on the error panel; {summary.folder} has no finished job with an accuracy"
        )


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--out", type=str, default=None, help="a folder for summary.md and .png, or their prefix (default: ./summary)"
    )
    parser.add_argument(
        "--recon",
        nargs="?",
        const="",
        default=None,
        metavar="PNG",
        help="also write a reconstruction figure (default: reconstructions.png beside the summary)",
    )
    add_checkpoint_folders(parser, "--recon")
    parser.add_argument(
        "--num-images", type=count, default=6, help="images in each panel of --recon, at least 1 (default 6)"
    )
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
    prefix = report_prefix(args.out, "summary", "--out")
    recon = None
    if args.recon is not None:
        recon = picture_path(args.recon or prefix.parent / "reconstructions.png", "reconstructions.png", "--recon")
    summary = collect(args.sweep_dir)
    if not summary.jobs:  # a folder of something else, or a sweep's parent: no empty summary written
        raise ConfigError(
            f"no sweep job in {args.sweep_dir}: a sweep's folder holds one folder per job, as {command('train')} -m "
            f"writes it (multirun/<date>_<time>/){sweeps_inside(args.sweep_dir)}"
        )
    check_references(summary, args.reference)
    md, png = report_file(prefix, ".md"), report_file(prefix, ".png")
    with writing(md):  # its folder made (the check removed what it made), a failure one line
        write_summary_files(summary, md, png, references=dict(args.reference))
    print(markdown(summary), end="")
    print(f"-> {md}" + (f", {png}" if summary.columns else ""))
    if recon is not None:
        roots = args.checkpoints or [Path("checkpoints")]
        with writing(recon):
            print(f"reconstructions: {reconstruction_figure(summary, recon, args.num_images, args.split, roots)}")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
