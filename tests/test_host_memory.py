"""Freed host memory is kept for the next step (glibc), when the training job asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import swwae.training.process
from helpers.config import ONE_BATCH
from swwae.training.run import train

# four 12 MiB tensors a step, allocated and freed, as a training step's activations are;
# prints the pages faulted in afresh by each of 12 steps
STEPS = """
import resource, sys, torch
from swwae.training.process import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [torch.ones(3 * 2**20) for _ in range(4)]
    del blocks
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, *faults)
"""


def page_faults_per_step(mode: str) -> tuple[bool, list[int]]:
    out = subprocess.run([sys.executable, "-c", STEPS, mode], capture_output=True, text=True, check=True).stdout
    applied, *faults = out.split()
    return applied == "True", [int(f) for f in faults]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.slow
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    applied, faults = page_faults_per_step("keep")
    assert applied
    one_step = 4 * 3 * 2**20 * 4 // 4096  # pages of the step's 48 MiB
    assert sum(faults[-4:]) < one_step // 10, faults  # once warm: next to nothing


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.slow
def test_the_training_job_asks_for_it_as_configured(make_config, monkeypatch, keep):
    calls = []
    monkeypatch.setattr(swwae.training.process, "keep_freed_memory", lambda: calls.append(True) or True)
    train(make_config(f"keep_freed_memory={str(keep).lower()}", *ONE_BATCH, "model.widths=[8,16]"))
    assert calls == ([True] if keep else [])
