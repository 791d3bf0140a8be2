"""Deconvnet projections of a trained SWWAE (Zeiler & Fergus): the strongest activations
of one stage, each sent back to pixel space through the switches recorded on the forward
pass (unpool -> ReLU -> transposed encoder conv), as an image grid.

    python scripts/project.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt stage=2
    python scripts/project.py <ckpt> stage=1 top=32 images=1000 split=test out=proj.png

Options, as key=value (or --key value): stage (1..number of stages; default: the top one),
top (how many activations, default 16), images (how many images of the split to search,
default 500), split (val | test, default val), distinct=false (allow several picks from one
channel), zoom (pixel magnification of the PNG; default: the smallest that makes an image
84 pixels wide, 3 for 28-pixel digits), out (the PNG, or a folder for proj.png; default
proj.png in the current folder, never beside the checkpoint). A bad option, or an out it
cannot write, is one ``error:`` line, exit status 2, before any work. The PNG (``swwae.images.projection_figure``)
has two title lines (run, stage, pooling; the channels), then rows labelled image |
projection: each pick's image above its projection (grey is zero, light positive, dark
negative). Where-free models (upsample, avg, strided, wavelet) project too, through their
where-free upsampling, and the script says so.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import math
import sys
import warnings
from pathlib import Path

from swwae.cli import one_line_errors, script_parser
from swwae.commands.outputs import picture_path, write_picture
from swwae.errors import ConfigError
from swwae.images import projection_figure, upscale_factor
from swwae.model import convs
from swwae.pooling.modes import POOL_MODES
from swwae.projection import check_stage, project, strongest
from swwae.training.checkpoints import load_model
from swwae.training.registry import data_of_run

PICTURE = "proj.png"  # in the current folder, unless out= says otherwise
COLUMNS = 8  # picks a line of the picture
OPTIONS = {"stage": int, "top": int, "images": int, "split": str, "distinct": str, "zoom": int, "out": str}
KEY_HELP = {
    "stage": "1..number of stages (default: the top one)",
    "top": "how many activations (default 16)",
    "images": "how many images of the split to search (default 500)",
    "split": "val | test (default val)",
    "distinct": "true | false: false allows several picks from one channel (default true)",
    "zoom": "pixel magnification of the PNG (default: an image 84 pixels wide at least; 3 for MNIST)",
    "out": f"the PNG, or a folder for {PICTURE} (default: {PICTURE}, here)",
}


def parser() -> argparse.ArgumentParser:
    parser = script_parser(__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("settings", nargs="*", default=[], metavar="key=value", help=f"a key of {', '.join(OPTIONS)}")
    for key, text in KEY_HELP.items():
        parser.add_argument(f"--{key}", metavar=key.upper(), help=text)  # checked with the key=value form
    return parser


def parse_command_line(argv: list[str]) -> tuple[Path, dict]:
    """The checkpoint and the options (``key=value`` or ``--key value``) of ``swwae project``'s
    command line, each checked and converted."""
    args = parser().parse_intermixed_args(argv)
    key, sep, _ = str(args.checkpoint).partition("=")
    if sep and key in OPTIONS and not args.checkpoint.exists():  # no checkpoint, only options
        raise ConfigError(f"the first argument is the checkpoint, then the options; got {str(args.checkpoint)!r}")
    given = {key: getattr(args, key) for key in OPTIONS if getattr(args, key) is not None}  # --key value
    flags = set(given)
    for arg in args.settings:
        key, sep, value = arg.partition("=")
        if not sep or key not in OPTIONS:
            raise ConfigError(f"unknown option {arg!r}; use key=value with a key of {', '.join(OPTIONS)}")
        if key in flags:
            raise ConfigError(f"{key} is given twice: --{key} {given[key]} and {arg}")
        given[key] = value
    options = {}
    for key, value in given.items():
        try:
            options[key] = OPTIONS[key](value)
        except ValueError:
            raise ConfigError(f"{key}={value!r} is not a valid {OPTIONS[key].__name__}") from None
    if options.get("split", "val") not in ("val", "test"):
        raise ConfigError(f"split={options['split']!r}: choose val or test")
    if options.get("distinct", "true").lower() not in ("true", "false"):
        raise ConfigError(f"distinct={options['distinct']!r}: choose true or false")
    for key in ("top", "images", "zoom"):
        if key in options and options[key] < 1:
            raise ConfigError(f"{key}={options[key]} must be >= 1")
    return args.checkpoint, options


def check_picture_size(net, stage: int, top: int, images: int, distinct: bool, zoom: int | None) -> None:
    """``ConfigError`` (one line, before any data is read) when the grid of the most picks
    ``top`` can give would be larger than Pillow opens without calling it a decompression bomb
    (``PIL.Image.MAX_IMAGE_PIXELS``): a zoom or a top that large asked for gigabytes, and the
    process was killed for its memory."""
    from PIL import Image

    height, width = net.image_shape[1:]
    zoom = upscale_factor(width) if zoom is None else zoom
    channels = convs(net.encoders[stage - 1])[-1].out_channels
    picks = min(top, channels if distinct else channels * images)
    size = (2 * math.ceil(picks / COLUMNS) * height * zoom, min(picks, COLUMNS) * width * zoom)
    if size[0] * size[1] > Image.MAX_IMAGE_PIXELS:
        raise ConfigError(
            f"the picture would be {size[1]:,} x {size[0]:,} pixels ({picks} picks at zoom {zoom}), more than "
            f"Pillow opens ({Image.MAX_IMAGE_PIXELS:,} pixels): ask a smaller zoom= or top="
        )


def run(
    checkpoint: Path,
    stage: int | None = None,
    top: int = 16,
    images: int = 500,
    split: str = "val",
    distinct: str = "true",
    zoom: int | None = None,
    out: str | Path | None = None,
) -> Path:
    out = picture_path(out, PICTURE, "out")
    module, config = load_model(checkpoint)
    net = module.net
    stage = len(net.encoders) if stage is None else stage
    check_stage(net, stage)  # before loading any data
    check_picture_size(net, stage, top, images, distinct.lower() == "true", zoom)
    if not POOL_MODES.entry(net.pool_mode).keeps_where:
        print(
            f"note: pool_mode={net.pool_mode} keeps no where: unpooling runs without switches "
            "(where-free upsampling), so nothing localises the projections",
            file=sys.stderr,
        )
    datamodule = data_of_run(config.get("data"), str(checkpoint), fetch_hint=f"swwae evaluate {checkpoint} --download")
    datamodule.setup("test")
    x = datamodule.images(split, images)
    picks = strongest(net, x, stage, top=top, distinct_channels=distinct.lower() == "true")
    projections = project(net, x[picks.image], picks, stage)
    title = (
        f"{config.get('run_name', checkpoint.parent.name)}: the {len(picks)} strongest activations of stage "
        f"{stage} ({net.pool_mode} pooling)\nchannels, left to right: {', '.join(map(str, picks.channel.tolist()))}"
    )
    figure = projection_figure(x[picks.image], projections, nrow=min(len(picks), COLUMNS), scale=zoom, title=title)
    write_picture(figure, out)
    print(
        f"{out}: {len(picks)} strongest activations of stage {stage} ({net.pool_mode} pooling), "
        f"channels {picks.channel.tolist()}"
    )
    return out


@one_line_errors
def main(argv=None) -> int:
    warnings.filterwarnings("ignore")
    checkpoint, options = parse_command_line(sys.argv[1:] if argv is None else argv)
    run(checkpoint, **options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
