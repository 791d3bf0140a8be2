"""Frozen-feature probes of trained networks, with pixel and random-weights controls.

    python scripts/probe.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt
    python scripts/probe.py <ckpt> [more ckpts] --labels 100 1000 all --json probes.json

For every checkpoint, and for the controls (raw pixels; each network's architecture with
random weights): a linear probe (logistic regression on standardised features, its
regularisation picked on the validation split) and a k-NN probe (cosine, k = 20,
distance-weighted) trained on N labelled training images, tested on the test split; then
how far each stage's what moves under 1-3 pixel shifts of the test images (``swwae.probe``).
The data come from the first checkpoint's run config with every training label known; the
labelled subsets are drawn from ``--seed`` alone, so every model is probed on the same
images. The checkpoints must share their data set and split.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import json
import time
import warnings
from pathlib import Path

import swwae
from swwae.cli import one_line_errors, script_parser
from swwae.commands.outputs import output_path, writing
from swwae.probe import random_like
from swwae.progress import progress
from swwae.training.probing import (
    check_probe_settings,
    check_same_split,
    encoder_key,
    load_data,
    parse_labels,
    probe_model,
    subsets_for,
)

RESULTS = "probes.json"  # --json's file in a folder it names

# helpers


def table(rows: list[dict], labels: list[str], shifts) -> str:
    head = [
        "model",
        "dim",
        *(f"linear {n}" for n in labels),
        *(f"k-NN {n}" for n in labels),
        *(f"shift {s}px" for s in shifts),
    ]
    lines = [head]
    for row in rows:
        inv = row.get("invariance", {})
        top = list(inv.values())[-1] if inv else {}  # pixels, stage_1, ..., the top stage last
        lines.append(
            [
                row["name"],
                str(row["dim"]),
                *(f"{100 * row['linear'][n]:.1f}" for n in labels),
                *(f"{100 * row['knn'][n]:.1f}" for n in labels),
                *(f"{top[s]:.3f}" if s in top else "-" for s in shifts),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    fmt = lambda line: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))  # noqa: E731
    return "\n".join([fmt(lines[0]), fmt(["-" * w for w in widths]), *map(fmt, lines[1:])])


def invariance_table(rows: list[dict], shifts) -> str:
    lines = ["relative change of each code when the test images shift, ||f(shift x) - f(x)|| / ||f(x)||:"]
    for row in rows:
        for code, values in row.get("invariance", {}).items():
            if code == "pixels" and row["name"] != "pixels":
                continue  # the same for every model: the pixels row has it
            lines.append(
                f"  {row['name']:<{max(len(r['name']) for r in rows)}}  {code:<8} "
                + "  ".join(f"{s}px {values[s]:.3f}" for s in shifts)
            )
    return "\n".join(lines)


def run(
    checkpoints: list[Path],
    labels: list[int | None],
    seed: int = 0,
    k: int = 20,
    stages: str = "top",
    shifts=(1, 2, 3),
    controls: bool = True,
    data_root: str | None = None,
) -> dict:
    nets = {str(path): swwae.load(path) for path in checkpoints}
    check_same_split({path: net.config for path, net in nets.items()})
    first = next(iter(nets))
    data = load_data((nets[first].config or {}).get("data"), data_root, source=first)
    subsets = subsets_for(data, labels, seed)
    steps = []  # (row name, network or None for the pixels, checkpoint or None): one probe each
    if controls:
        steps.append(("pixels", None, None))
        for key in dict.fromkeys(encoder_key(net) for net in nets.values()):
            net = random_like(next(n for n in nets.values() if encoder_key(n) == key), seed=seed)
            steps.append((f"random weights {key}", net, None))
    for path, net in nets.items():
        steps.append((str(net.config.get("run_name") or Path(path).parent.name), net, path))
    rows = []
    for name, net, path in progress(steps, "probe", name=lambda step: step[0]):
        row = (
            probe_model(name, data, subsets, k=k, shifts=shifts)
            if net is None
            else probe_model(name, data, subsets, net, k, stages, shifts)
        )
        rows.append(row if path is None else row | {"checkpoint": path})
    return {
        "data": data.name,
        "seed": seed,
        "k": k,
        "k_capped": min(len(idx) for idx in subsets.values()) < k,  # k-NN takes k = N where N < k
        "features": stages,
        "labels": list(subsets),
        "shifts": list(shifts),
        "train_images": int((data.train_y >= 0).sum()),
        "rows": rows,
    }


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("checkpoints", type=Path, nargs="+")
    parser.add_argument("--labels", nargs="+", default=["100", "1000", "all"], help="labelled training images (or all)")
    parser.add_argument("--seed", type=int, default=0, help="draws the labelled subsets and the random weights")
    parser.add_argument("--k", type=int, default=20, help="neighbours of the k-NN probe")
    parser.add_argument(
        "--features",
        choices=["top", "all"],
        default="top",
        help="top: the top what, flattened; all: every stage's what, pooled to 2x2",
    )
    parser.add_argument("--shifts", type=int, nargs="+", default=[1, 2, 3], help="pixels, for the invariance")
    parser.add_argument("--no-controls", action="store_true", help="skip the pixel and random-weights rows")
    parser.add_argument(
        "--json", type=str, default=None, help=f"also write the results here (a .json file, or a folder for {RESULTS})"
    )
    parser.add_argument("--data-root", default=None, help="where the dataset lives, if not where training read it")
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    check_probe_settings(args.k, args.seed, args.shifts)
    results = None if args.json is None else output_path(args.json, RESULTS, "--json", "the results")
    started = time.perf_counter()
    result = run(
        args.checkpoints,
        parse_labels(args.labels),
        args.seed,
        args.k,
        args.features,
        args.shifts,
        not args.no_controls,
        args.data_root,
    )
    print(
        f"{result['data']}: probes trained on N of its {result['train_images']} training images (seed "
        f"{result['seed']}), regularisation picked on val, accuracy % on test; "
        f"k-NN k={result['k']}{' (N where N is smaller)' if result['k_capped'] else ''}; "
        f"features: {result['features']} what"
    )
    print(table(result["rows"], result["labels"], result["shifts"]))
    print(invariance_table(result["rows"], result["shifts"]))
    print(f"({time.perf_counter() - started:.0f} s)")
    if results is not None:
        with writing(results):
            results.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
