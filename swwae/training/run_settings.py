"""The run's own settings: the top-level keys of a run's config that are plain values (seed,
resume, test, ...), and where it writes (the ``paths`` section), each with its type, default and
help, declared here only. A module of its own so that both the config's composition
(``swwae.training.composing``, which stores them as ``settings/run`` and ``settings/paths``) and
the typed run spec (``swwae.training.spec``, whose ``RunSpec`` extends them) read them. Plain
Python: no torch, no Lightning."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from swwae.errors import ConfigError, excerpt
from swwae.settings import Int, PathText, TrueFalseOrAuto, bounded, whole
from swwae.training.runs.decision import resume_mode


class RunSettings(BaseModel):
    """The run's own settings, the top-level keys that are plain values: each one's type, default
    and help, declared here only. The config reads them from here (``settings/run``, stored by
    ``swwae.training.composing.store_settings``), and so does the table in docs/configs.md
    (``scripts/settings_table.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    seed: Int = Field(0, description="every random draw of a run follows from it: a run is reproducible")
    resume: Literal["auto", "true", "false"] = Field(
        "auto",
        description="auto: continue the run's checkpoint folder when it holds an unfinished run of this config (a "
        "requeued job), else start fresh; true: always continue; false: always start fresh (the old run moved aside)",
    )
    keep_previous: bounded(int, ge=1) | None = Field(
        None,
        description="how many old runs of this run name, moved aside by fresh starts (`<run>.previous-<time>`), "
        "to keep (the one moved aside now among them): a fresh start deletes the older ones; null: keep them all",
    )
    test: StrictBool = Field(True, description="evaluate the best checkpoint on the test split after training")
    keep_freed_memory: StrictBool = Field(
        True, description="CPU speed: glibc keeps freed memory for the next step (docs/performance.md)"
    )
    flush_denormal: StrictBool = Field(
        True, description="CPU speed: floats below ~1e-38 count as zero (soft pooling made them; docs/performance.md)"
    )
    channels_last: TrueFalseOrAuto = Field(
        "auto",
        description="weights and batches in (N, H, W, C) memory; auto: on the CPU for hard, upsample, avg and "
        "strided pooling (faster there), not on a GPU (unmeasured there); docs/performance.md",
    )
    compile: StrictBool | StrictStr = Field(
        False, description="true: torch.compile the network (inductor), or a backend's name (aot_eager)"
    )
    verbose: StrictBool = Field(
        False, description="true: Lightning's own lines too (devices, tips, model summary, restoring checkpoints)"
    )

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value):
        if not whole(value) or not 0 <= value < 2**32:
            shown = "null" if value is None else excerpt(repr(value))
            raise ConfigError(f"seed must be an integer in 0..{2**32 - 1}, got {shown}")
        return value

    @field_validator("resume", mode="before")
    @classmethod
    def _resume(cls, value):
        return resume_mode(value)


class PathSettings(BaseModel):
    """Where the run writes, relative paths from the folder the command runs in. More keys may be
    there, for a config's own interpolations (``paths.data_dir``)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    log_dir: PathText = Field("logs", description="the loggers' root: one `tensorboard --logdir logs` shows every run")
    checkpoint_dir: PathText = Field(
        "checkpoints", description="a run's best.ckpt and last.ckpt: `<checkpoint_dir>/<run name>/`"
    )
    output_dir: PathText | None = Field(
        None, description="this run's folder (its config, log, metrics.json): Hydra's, which the config names"
    )
    output_root: PathText = Field("outputs", description="run folders: `<output_root>/<run name>/<time>/`")
    sweep_root: PathText = Field("multirun", description="sweep folders: `<sweep_root>/<time>/`")
