"""Reading a sweep folder: one ``Job`` per job folder (its overrides and ``metrics.json``),
grouped into ``Group``s by the overrides that vary, seed excepted, in one ``Summary``.

The data model that the table, the plots and the Hydra callback all read; it also writes
the ``metrics.json`` of a job that raised (``train.py``), so that the reader and the writer
of that record live side by side. Every file of a job folder is read with bounds and parsed
(``swwae.files``, ``swwae.stored``): one that does not makes that job an unreadable one saying
why in a few words, and the others are read on. A checkpoint a record names is taken only from
the sweep folder or the folders the user names (``Job.checkpoint``). No plotting, no Hydra
callback here.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from swwae.errors import ConfigError, Unreadable, plural
from swwae.files import is_inside, read_json, read_yaml, sha256_of
from swwae.stats import mean_std
from swwae.stored import parse_metrics, parse_overrides

SEED_KEYS = ("seed", "+seed", "++seed")
SWEEP_MARK = "multirun.yaml"  # the file Hydra writes into every sweep folder
HYDRA_ESCAPED = re.compile(r"\\([\\()\[\]{}:=, \t])")  # what Hydra escapes in a sweep job's overrides

# helpers


def mapping_of(value) -> dict:
    """``value`` if it is a mapping, else KeyError: a saved config of another shape."""
    if not isinstance(value, dict):
        raise KeyError("not a mapping")
    return value


def write_failed_job(folder, info: dict, error: str) -> dict:
    """The ``metrics.json`` of a job that raised: who it was, and the one-line error."""
    record = dict(info) | {"status": "failed", "error": error, "metrics": {}}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(record, indent=2))
    return record


def pretty_key(key: str) -> str:
    """``+experiment/hard_vs_soft@_global_`` -> ``hard_vs_soft``; ``model.beta`` stays."""
    key = key.lstrip("+~").split("@")[0]
    return key.rsplit("/", 1)[-1]


def readable(value: str) -> str:
    """An override's value as the user typed it: Hydra writes a swept string escaped into the
    job's ``overrides.yaml`` (``$\\{model.lr\\}`` for ``${model.lr}``, ``a\\ b`` for ``a b``)."""
    return HYDRA_ESCAPED.sub(r"\1", value)


def pretty_value(value: str) -> str:
    """Long floats (Optuna's picks) to 4 significant digits; everything else as typed."""
    number = as_number(value)
    return f"{number:.4g}" if number is not None and len(value) > 7 and not value.isdigit() else readable(value)


def reason(err: Unreadable, path: Path, folder: Path) -> str:
    """Why a file of a job folder is unreadable, in a few words: ``metrics.json: not JSON (...)``,
    not the whole message again (the job's folder is named once, by whoever reports it)."""
    _, found, why = str(err).partition(f"{path} is unreadable: ")
    return f"{path.relative_to(folder)}: {why}" if found else str(err)


def as_number(value: str) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# classes


@dataclass
class Job:
    folder: Path
    overrides: dict[str, str]  # this job's command-line and sweep overrides, key -> value
    record: dict  # its metrics.json, or a failure record made up when there is none

    @property
    def ok(self) -> bool:
        return self.record.get("status", "ok") == "ok" and bool(self.record.get("metrics"))

    @property
    def metrics(self) -> dict[str, float]:
        metrics = dict(self.record.get("metrics") or {})
        for split in ("val", "test"):
            if f"{split}/acc" in metrics:
                metrics[f"{split}/error_pct"] = 100.0 * (1.0 - metrics[f"{split}/acc"])
        return metrics

    @property
    def monitor(self) -> str | None:
        """The metric that picked the job's best checkpoint, e.g. ``val/acc (max)``."""
        monitor = self.record.get("monitor") or {}
        return f"{monitor['metric']} ({monitor['mode']})" if monitor.get("metric") else None

    @property
    def seed(self):
        return self.record.get("seed", next((self.overrides[k] for k in SEED_KEYS if k in self.overrides), None))

    def run_folder(self) -> Path | None:
        """checkpoints/<run_name>/ of this job, from its saved config (``paths.checkpoint_dir``,
        relative to the launch folder), read with bounds; None when it cannot be told."""
        hydra = self.folder / ".hydra"
        try:
            paths = (mapping_of(read_yaml(hydra / "config.yaml", "sweep file")).get("paths")) or {}
            folder = Path(str(mapping_of(paths)["checkpoint_dir"]))
            if not folder.is_absolute():
                runtime = mapping_of(mapping_of(read_yaml(hydra / "hydra.yaml", "sweep file"))["hydra"])["runtime"]
                folder = Path(str(mapping_of(runtime)["cwd"])) / folder
        except (Unreadable, KeyError):  # no saved config, or not one swwae's sweeps write
            return None
        run_name = self.record.get("run_name")
        if "${" in str(folder) or not run_name:  # an interpolation only Hydra resolves
            return None
        return folder / run_name

    def checkpoint(self, roots: Sequence[Path] = (), name: str = "best.ckpt") -> Path | None:
        """The checkpoint of this job that its metrics.json reports (without one: the run
        folder's ``name``; None when it cannot be told). ``Unreadable`` (a few words: a report
        leaves the job out in one line) unless it lies where the user's folders hold it, inside
        the sweep folder or one of ``roots`` (the checkpoint folders the user named), told before
        anything is opened: a record naming ``/etc/passwd`` is refused, not read. A reported one
        must then hold the bytes measured (``checkpoint_sha256``) and lie in the job's run folder
        (where the saved config tells it; a record without a SHA-256 only there)."""
        own = self.run_folder()
        named = self.record.get("checkpoint")
        path = Path(named) if named else own / name if own is not None else None
        if path is None:
            return None
        allowed = [self.folder.parent, *roots]
        if not any(is_inside(path, root) for root in allowed):
            raise Unreadable(f"checkpoint {path} lies outside {' and '.join(map(str, allowed))}")
        if named:
            self.check_measured(path, own)
        return path

    def check_measured(self, path: Path, own: Path | None) -> None:
        """``Unreadable`` unless ``path``, reported by this job's metrics.json, holds the weights
        it measured."""
        measured, inside = self.record.get("checkpoint_sha256"), own is not None and is_inside(path, own)
        if (own is not None and not inside) or (measured is None and not inside):
            raise Unreadable(f"metrics.json names checkpoint {path}, outside the job's run folder")
        if measured is not None and sha256_of(path, "checkpoint") != measured:
            raise Unreadable(f"checkpoint {path} no longer holds the weights metrics.json measured")


@dataclass
class Group:
    label: str  # the varying overrides, seed excepted: "model=swwae_soft model.beta=10"
    keys: dict[str, str]  # the same, pretty key -> value
    jobs: list[Job] = field(default_factory=list)

    @property
    def ok(self) -> list[Job]:
        return [j for j in self.jobs if j.ok]

    @property
    def failed(self) -> list[Job]:
        return [j for j in self.jobs if not j.ok]

    def stat(self, metric: str) -> tuple[float, float | None]:
        return mean_std([j.metrics.get(metric) for j in self.ok])


@dataclass
class Summary:
    folder: Path
    jobs: list[Job]
    groups: list[Group]
    common: dict[str, str]  # overrides every job shares
    columns: list[str]  # metrics shown, in order

    @property
    def failed(self) -> list[Job]:
        return [j for j in self.jobs if not j.ok]


def read_job(folder: Path) -> Job:
    """A job folder's overrides and record, each read with bounds and parsed; a file that does
    not parse, or a metric that is not a finite number, makes the job an unreadable one whose
    error says why, and the other jobs are read on. No metrics.json: a failed job."""
    overrides_file, metrics_file = folder / ".hydra" / "overrides.yaml", folder / "metrics.json"
    overrides, problem = {}, None
    if overrides_file.exists() or overrides_file.is_symlink():
        try:
            overrides = parse_overrides(read_yaml(overrides_file, "sweep file"), f"sweep file {overrides_file}")
        except Unreadable as err:
            problem = reason(err, overrides_file, folder)
    try:
        record = parse_metrics(read_json(metrics_file, "metrics.json"), f"metrics.json {metrics_file}")
        odd = next((k for k, v in record["metrics"].items() if not math.isfinite(v)), None)
        if odd is not None:
            problem = problem or f"metrics.json: metric {odd[:60]} is {record['metrics'][odd]}, not a finite number"
    except Unreadable as err:
        record = {"metrics": {}}
        if metrics_file.exists() or metrics_file.is_symlink():
            problem = problem or reason(err, metrics_file, folder)
        else:
            record |= {
                "status": "failed",
                "error": "no metrics.json: the job did not finish (killed, or still running?)",
            }
    if problem is not None:
        record = record | {"status": "unreadable", "error": problem}
    status = "ok" if record.get("status") is None else record["status"]
    if status == "ok" and not record.get("metrics"):
        status, record = "failed", record | {"error": record.get("error") or "metrics.json holds no metrics"}
    if status != "ok" and not record.get("error"):  # a failed job always says why
        record = record | {"error": f"metrics.json says the job's status is {status[:40]!r}, with no error"}
    return Job(folder, overrides, record | {"status": status})


def job_order(folder: Path):
    number = folder.name.split("_", 1)[0]
    return (int(number), folder.name) if number.isdigit() else (math.inf, folder.name)


def group_order(varying: list[str], groups: dict[tuple, Group]):
    """Sort key of the groups: by each varying override in turn, its values ascending when
    all are numbers (100, 600, 1000), otherwise in the order the jobs first show them. One
    sweep keeps its launch order; several sweeps run into one folder (each numbering its
    jobs from 0) read as one table."""
    ranks = []
    for i in range(len(varying)):
        seen = list(dict.fromkeys(values[i][1] for values in groups))
        numbers = [as_number(v) for v in seen]
        ordered = sorted(seen, key=as_number) if None not in numbers else seen
        ranks.append({v: r for r, v in enumerate(ordered)})
    return lambda values: tuple(ranks[i][v] for i, (_, v) in enumerate(values))


SWEEPS_LOOKED_AT = 10_000


def is_job_folder(folder: Path) -> bool:
    """Whether ``folder`` is a sweep job's: Hydra's ``.hydra/`` in it, or the job's ``metrics.json``."""
    return folder.is_dir() and ((folder / ".hydra").is_dir() or (folder / "metrics.json").is_file())


def sweeps_inside(folder: Path) -> str:
    """The end of an error line about ``folder``, which holds no sweep's jobs: the sweep folders
    directly inside it (``multirun/`` holds one a day and time), if any, the newest last (Hydra's
    names sort by time). A sweep folder is told by Hydra's ``multirun.yaml``: one look a folder,
    at the first ``SWEEPS_LOOKED_AT`` entries (a folder of images given by mistake may hold millions).
    A job's own folder, given for its sweep's, names that sweep."""
    folder = Path(folder)
    if is_job_folder(folder):
        sweep = folder.parent if folder.parent != Path(".") else Path(os.path.abspath(folder)).parent  # 0_run, or .
        return f"; it is one job of the sweep {sweep}"
    entries = itertools.islice(folder.iterdir(), SWEEPS_LOOKED_AT)
    inside = sorted(p for p in entries if os.path.isfile(p / SWEEP_MARK))  # False where unreadable
    if len(inside) > 1:
        return f"; it holds {plural(len(inside), 'sweep')}, the newest {inside[-1]}"
    return f"; it holds one sweep, {inside[0]}" if inside else ""


def collect(sweep_dir) -> Summary:
    """Every job folder under ``sweep_dir`` (one level down: it has ``.hydra/`` or a
    ``metrics.json``), grouped by the overrides that vary, seed excepted."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ConfigError(f"sweep folder {sweep_dir} does not exist")
    folders = [p for p in sweep_dir.iterdir() if is_job_folder(p)]
    jobs = [read_job(p) for p in sorted(folders, key=job_order)]
    keys = list(dict.fromkeys(k for j in jobs for k in j.overrides))
    varying = [k for k in keys if k not in SEED_KEYS and len({j.overrides.get(k) for j in jobs}) > 1]
    common = {k: jobs[0].overrides[k] for k in keys if k not in varying and k not in SEED_KEYS and jobs}
    groups: dict[tuple, Group] = {}
    for job in jobs:
        values = tuple((k, job.overrides.get(k, "")) for k in varying)
        if values not in groups:
            pretty = {pretty_key(k): pretty_value(v) for k, v in values}
            label = " ".join(f"{k}={v}" for k, v in pretty.items()) or job.record.get("model") or "all jobs"
            groups[values] = Group(label, pretty)
        groups[values].jobs.append(job)
    found = {m for j in jobs if j.ok for m in j.metrics}
    split = "test" if any(m.startswith("test/") for m in found) else "val"  # val: runs with test=false
    middles = sorted((m for m in found if m.startswith(f"{split}/middle_mse_")), key=lambda m: int(m.rsplit("_", 1)[1]))
    columns = [f"{split}/{m}" for m in ("recon_mse", "acc", "error_pct") if f"{split}/{m}" in found] + middles
    columns += ["train_time_s"] if "train_time_s" in found else []
    return Summary(
        sweep_dir, jobs, [groups[v] for v in sorted(groups, key=group_order(varying, groups))], common, columns
    )
