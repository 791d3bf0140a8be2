"""The feature study's table and figure: every checkpoint of a sweep probed with the frozen-
feature probes of ``python scripts/probe.py``, beside its own architecture with random weights (the
job's seed) and the raw pixels; mean ± sample std over seeds per config.

    python train.py -m experiment=feature_study
    python scripts/feature_study.py multirun/<time> --out docs/feature_study

writes <out>.md (the table), <out>.png (the figure) and <out>.json (every row, per seed).
Every model is probed on the same labelled subsets (--seed), its regularisation picked on
the validation split, the test split read once per model. Exit status 0, 1 when a job of the
sweep failed (the rest is reported), 2 for bad input.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import json
import warnings
from pathlib import Path

import swwae
from swwae.cli import one_line_errors, script_parser
from swwae.errors import ConfigError
from swwae.probe import random_like
from swwae.progress import progress
from swwae.stats import mean_std, mean_std_text
from swwae.training.probing import check_same_split, encoder_key, load_data, parse_labels, probe_model, subsets_for
from swwae.training.sweep.figures import save_figure
from swwae.training.sweep.jobs import collect

# helpers


def top_change(row: dict, px: int) -> float:
    top = list(row["invariance"].values())[-1]  # pixels, stage_1, ..., the top stage last
    return top[px] if px in top else top[str(px)]  # int keys, or str ones read back from the .json


def probe_sweep(sweep_dir: Path, labels, seed: int, k: int, shifts) -> dict:
    summary = collect(sweep_dir)
    jobs = [j for j in summary.jobs if j.ok and j.checkpoint() and j.checkpoint().is_file()]
    if not jobs:
        raise ConfigError(f"no finished job with a checkpoint in {sweep_dir}")
    label = {id(j): " ".join(g.keys.values()) or g.label for g in summary.groups for j in g.jobs}
    nets = {str(j.checkpoint()): swwae.load(j.checkpoint()) for j in jobs}
    check_same_split({path: net.config for path, net in nets.items()})
    first = next(iter(nets))
    data = load_data((nets[first].config or {}).get("data"), source=first)
    subsets = subsets_for(data, labels, seed)
    rows = [probe_model("pixels", data, subsets, k=k, shifts=shifts) | {"group": "pixels", "seed": None}]
    randoms = {}
    for job in progress(jobs, "feature study: probing", name=lambda job: str(job.record.get("run_name"))):
        net = nets[str(job.checkpoint())]
        group, job_seed = label[id(job)], int(job.seed)
        row = probe_model(str(job.record.get("run_name")), data, subsets, net, k, shifts=shifts)
        trains_recon = float(net.config.get("model", {}).get("lambda_rec", 1.0)) > 0  # else its decoder is untrained
        rows.append(
            row
            | {
                "group": group,
                "seed": job_seed,
                "test/recon_mse": job.metrics.get("test/recon_mse") if trains_recon else None,
                "test/acc": job.metrics.get("test/acc"),
                "encoder": encoder_key(net),
            }
        )
        key = (encoder_key(net), job_seed)
        if net.classifier is None and key not in randoms:  # the supervised arm's encoder is hard's
            randoms[key] = probe_model(
                f"random {key[0]} seed{job_seed}", data, subsets, random_like(net, seed=job_seed), k, shifts=shifts
            ) | {"group": f"random weights ({group})", "seed": job_seed}
    rows.extend(randoms.values())
    return {
        "sweep": str(sweep_dir),
        "data": data.name,
        "labels": list(subsets),
        "seed": seed,
        "k": k,
        "shifts": list(shifts),
        "failed": [str(j.folder.name) for j in summary.failed],
        "rows": rows,
    }


def groups(result: dict) -> dict[str, list[dict]]:
    """Rows by group: pixels, then each trained config followed by its random-weights twin."""
    by_group: dict[str, list[dict]] = {}
    for row in result["rows"]:
        by_group.setdefault(row["group"], []).append(row)
    order = ["pixels"]
    for name in by_group:
        if name != "pixels" and not name.startswith("random"):
            order += [name] + ([f"random weights ({name})"] if f"random weights ({name})" in by_group else [])
    return {name: by_group[name] for name in order}


def markdown(result: dict, px: int = 2) -> str:
    labels = result["labels"]
    head = [
        "features",
        "seeds",
        *(f"linear {n}" for n in labels),
        *(f"k-NN {n}" for n in labels),
        f"top-what change, {px} px shift",
        "test recon MSE",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in groups(result).items():
        seeds = len(rows) if rows[0]["seed"] is not None else "-"
        values = [
            *(mean_std_text([r["linear"][n] for r in rows], 1, scale=100) for n in labels),
            *(mean_std_text([r["knn"][n] for r in rows], 1, scale=100) for n in labels),
            mean_std_text([top_change(r, px) for r in rows], 3),
            mean_std_text([r.get("test/recon_mse") for r in rows], 4),
        ]
        lines.append(f"| {name} | {seeds} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def figure(result: dict, out: Path, px: int = 2) -> Path:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = groups(result)
    trained = [n for n in table if n != "pixels" and not n.startswith("random")]
    few = result["labels"][0]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    x = range(len(trained))
    for offset, (suffix, style) in enumerate([("", {}), ("random", {"hatch": "//", "alpha": 0.5})]):
        names = [n if not suffix else f"random weights ({n})" for n in trained]
        for ax, value in [(axes[0], lambda r: 100 * r["linear"][few]), (axes[2], lambda r: top_change(r, px))]:
            means = [mean_std([value(r) for r in table.get(n, [])])[0] for n in names]
            stds = [mean_std([value(r) for r in table.get(n, [])])[1] or 0 for n in names]
            ax.bar(
                [i + 0.4 * offset - 0.2 for i in x],
                means,
                0.4,
                yerr=stds,
                capsize=2,
                label="trained" if not suffix else "random weights",
                color=f"C{offset}",
                **style,
            )
    pixels = table["pixels"][0]
    axes[0].axhline(100 * pixels["linear"][few], color="k", ls="--", lw=1, label="raw pixels")
    axes[0].set(ylabel=f"linear probe accuracy %, {few} labels", title="frozen top what, linear probe")
    axes[0].set_ylim(bottom=max(0, min(p.get_height() for p in axes[0].patches) - 10))
    axes[2].axhline(top_change(pixels, px), color="k", ls="--", lw=1, label="raw pixels")
    axes[2].set(ylabel=f"||f(shift x) - f(x)|| / ||f(x)||, {px} px", title="top what's change under a shift")
    for ax in (axes[0], axes[2]):
        ax.set_xticks(list(x), trained, rotation=35, ha="right")
        ax.legend(fontsize=8)
    for i, name in enumerate(trained):
        rows = [r for r in table[name] if r.get("test/recon_mse")]
        if not rows:  # a model that does not train its decoder (the supervised reference)
            continue
        axes[1].scatter(
            [r["test/recon_mse"] for r in rows],
            [100 * r["linear"][few] for r in rows],
            color=f"C{i % 10}",
            marker="os^D"[i // 10 % 4],
            label=name,
        )
    axes[1].set(
        xscale="log",
        xlabel="test reconstruction MSE (log)",
        ylabel=f"linear probe accuracy %, {few} labels",
        title="reconstruction vs feature quality, per seed",
    )
    axes[1].xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes[1].legend(fontsize=7)
    return save_figure(fig, out)


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--out", type=Path, default=None, help="prefix of the .md/.png/.json (default: <sweep>/features)"
    )
    parser.add_argument("--labels", nargs="+", default=["100", "1000", "all"])
    parser.add_argument("--seed", type=int, default=0, help="draws the labelled subsets")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--shifts", type=int, nargs="+", default=[1, 2, 3])
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    labels = parse_labels(args.labels)
    if 2 not in args.shifts:
        raise ConfigError("--shifts must include 2: the table reports the 2 px shift")
    result = probe_sweep(args.sweep_dir, labels, args.seed, args.k, args.shifts)
    out = args.out or args.sweep_dir / "features"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(result)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    figure(result, out.with_suffix(".png"))
    print(text, end="")
    print(f"-> {out.with_suffix('.md')}, {out.with_suffix('.png')}, {out.with_suffix('.json')}")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
