"""The job reads top to bottom (docs/architecture.md): following the config from
``swwae.training.run.train``, no module is entered more than twice.

"Following the config" is measured, not read: a profiler records every call into swwae's
code made by swwae's code alone below ``train`` (a call made by Lightning, Hydra or torch,
such as a callback hook or a model built by ``instantiate``, is theirs) that receives the
config or a part of it (the Hydra config or any node of it, the run spec or any section, the
resolved dict or any dict or list in it), as an argument or inside one. The modules of those
calls, in order, are the run's path; a module is entered each time the path comes to it from
another one (``train``'s own module counts: the path starts there)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import DictConfig, ListConfig
from pydantic import BaseModel

import swwae.training.run as run

JOB = "swwae.training.run"
ROOTS = ("cfg", "spec", "stored")  # train's locals that hold the config


def parts_of(value, ids: set[int]) -> None:
    """The ids of ``value`` and of every container inside it."""
    if id(value) in ids:
        return
    if isinstance(value, DictConfig):
        ids.add(id(value))
        for key in value._content if isinstance(value._content, dict) else ():
            parts_of(value._get_node(key), ids)
    elif isinstance(value, ListConfig):
        ids.add(id(value))
        for index in range(len(value._content) if isinstance(value._content, list) else 0):
            parts_of(value._get_node(index), ids)
    elif isinstance(value, BaseModel):
        ids.add(id(value))
        for item in value.__dict__.values():
            parts_of(item, ids)
    elif isinstance(value, (dict, list, tuple)):
        ids.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            parts_of(item, ids)


def arguments(frame) -> list:
    """A call's arguments, and the items of any dict or tuple among them (``**kwargs``, ``*args``)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    values = [frame.f_locals.get(name) for name in code.co_varnames[:count]]
    inside = [
        v
        for value in values
        if isinstance(value, (dict, tuple))
        for v in (value.values() if isinstance(value, dict) else value)
    ]
    return [v for v in values + inside if v is not None and not isinstance(v, (bool, int, float, str))]


def module_of(frame) -> str:
    return frame.f_globals.get("__name__", "")


def path_of_the_config(cfg) -> list[str]:
    """Train ``cfg``; the module and function of each call that follows the config, in order."""
    stops: list[str] = []
    job_code = run.train.__code__

    def profile(frame, event, arg):
        if event != "call" or not module_of(frame).startswith("swwae"):
            return
        caller, job = frame.f_back, None
        while caller is not None:  # swwae's own frames, all the way up to train
            if not module_of(caller).startswith("swwae"):
                return
            if caller.f_code is job_code:
                job = caller
                break
            caller = caller.f_back
        if job is None:
            return
        ids: set[int] = set()
        for name in ROOTS:
            if name in job.f_locals:
                parts_of(job.f_locals[name], ids)
        if any(id(v) in ids for v in arguments(frame)):
            stops.append(f"{module_of(frame)}.{frame.f_code.co_name}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run.train(cfg)
    finally:
        sys.setprofile(previous)
    return stops


def entries(stops: list[str]) -> Counter:
    """How often the path enters each module, ``train``'s own first."""
    counts, here = Counter({JOB: 1}), JOB
    for stop in stops:
        module = stop.rsplit(".", 1)[0]
        if module != here:
            counts[module] += 1
        here = module
    return counts


def check_path(stops: list[str]) -> None:
    counts = entries(stops)
    assert len(stops) > 5, stops  # the tracer sees the path (a broken tracer would pass anything)
    over = {module: n for module, n in counts.items() if n > 2}
    assert not over, f"entered more than twice: {over}; the path: {' > '.join(stops)}"


@pytest.mark.slow
def test_a_fresh_run_a_continued_one_and_a_finished_one_enter_no_module_more_than_twice(make_config):
    fresh = path_of_the_config(make_config("model.widths=[4]", "trainer.max_epochs=1"))
    check_path(fresh)
    # what the job's steps hand on: the checks, the folder's identity, the parts built, the report
    modules = {stop.rsplit(".", 1)[0] for stop in fresh}
    assert {"swwae.training.spec", "swwae.training.composing", "swwae.training.callbacks"} <= modules

    continued = make_config("model.widths=[4]", "trainer.max_epochs=2", "resume=true")
    check_path(path_of_the_config(continued))

    finished = make_config("model.widths=[4]", "trainer.max_epochs=2", "resume=true")
    metrics = Path(finished.paths.output_dir) / "metrics.json"
    assert json.loads(metrics.read_text())["epochs"] == 2
    metrics.unlink()  # killed after its last checkpoint: evaluated again on the job's one Trainer
    check_path(path_of_the_config(finished))
    assert metrics.is_file()


def test_the_count_sees_a_zigzag():
    """The rule itself: returning to a module counts as entering it again."""
    path = [f"{JOB}.check", "a.f", f"{JOB}.g", "a.h", "a.i", f"{JOB}.j"]
    assert entries(path) == Counter({JOB: 3, "a": 2})
    with pytest.raises(AssertionError, match="entered more than twice"):
        check_path(path)
