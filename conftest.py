"""Every Python block of README.md and docs/*.md runs as a test (Sybil collects them: ``pytest``,
or ``pytest README.md docs``). Each block runs alone, in a fresh namespace, in a temporary
folder laid out as after a default run (``checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt``
is a small shipped checkpoint), so that a reader can paste any block on its own. A block whose
first line is ``# needs: internet`` (or ``gpu``, or an optional extra: ``onnx``, ``hub``,
``mlflow``, ``wandb``) is skipped, visibly, where that is missing. A block that starts with
``>>>`` is a doctest: its printed output must match too.

A test that needs an optional extra is marked ``@pytest.mark.extra("optuna")`` (a block that
needs one gets the same marker), and is skipped where the extra is missing, with the pip command
that adds it (``tests/helpers/extras.py``): ``pytest`` passes with only the ``dev`` extra, and
``pytest -m extra`` runs the tests of the extras alone. Every test and block draws its random
numbers from a seed of its own (``seeded``), and every property test (hypothesis) the same
examples every run (the ``suite`` profile). Fixtures of the test modules live in
``tests/conftest.py``."""

from __future__ import annotations

import doctest
import os
import random
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings
from sybil import Sybil
from sybil.evaluators.python import pad
from sybil.parsers.markdown import CodeBlockParser

from tests.helpers import extras
from tests.helpers.docs import NEEDS

# Without CUDA, Triton's kernels (swwae.pooling.fused) run in its interpreter, on the CPU: Triton
# chooses when it loads, so this comes before anything loads it (Lightning does)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parent
SHIPPED_CHECKPOINT = ROOT / "tests" / "data" / "checkpoint_v0_1.ckpt"  # (4)3c-2p-(8)3c-2p-10fc, mnist_sample
RUN = "swwae_hard_mnist_sample_seed0"


# Property tests draw the same examples every run, from a hash of each test: a red CI is a change,
# never a lucky draw. `pytest --hypothesis-profile search` draws fresh ones each run, to hunt for new
# cases (hypothesis keeps a failing one in .hypothesis/ and replays it first the next time)
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("search", derandomize=False)
settings.load_profile("suite")


def pytest_addoption(parser):
    parser.addoption(
        "--test-seed",
        type=int,
        default=0,
        help="added to every test's own seed: another draw of every test's random inputs (default 0)",
    )


@pytest.fixture(autouse=True)
def seeded(request):
    """Every test starts from a seed of its own (its id's CRC-32 plus ``--test-seed``) in Python's,
    NumPy's and torch's global generators: it draws the same numbers whatever ran before it in its
    worker (pytest-xdist hands tests out as workers come free), so it passes or fails alone, never
    by the order of the run. ``pytest --test-seed 1`` draws others: a test that fails there passed
    by luck."""
    seed = (zlib.crc32(request.node.nodeid.encode()) + request.config.getoption("test_seed")) % 2**32
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def missing(what: str) -> str | None:
    """Why a block that needs ``what`` cannot run here, or None if it can."""
    if what == "internet":
        return "needs: internet (the tests run offline)"
    if what == "gpu":
        import torch

        return None if torch.cuda.is_available() else "needs: gpu (no CUDA device here)"
    if what in extras.EXTRAS:
        return extras.missing(what)
    raise ValueError(f"unknown '# needs: {what}': write internet, gpu or one of {', '.join(extras.EXTRAS)}")


def run_alone(example) -> None:
    """Run one block in a fresh namespace: as a doctest if it starts with ``>>>``, else as a script."""
    source = example.parsed
    needs = NEEDS.match(source)
    if needs and (reason := missing(needs["what"])):
        pytest.skip(reason)
    line = example.line + source.line_offset
    if source.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(
            str(source), {}, f"{Path(example.path).name}:{line}", example.path, line
        )
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report: list[str] = []
        runner.run(test, out=report.append)
        if runner.failures:
            pytest.fail("".join(report), pytrace=False)
        return
    code = compile(pad(source, line), example.path, "exec", dont_inherit=True)
    exec(code, {"__name__": "__docs__"})


@pytest.fixture
def docs_workspace(tmp_path, monkeypatch):
    """The folder a block runs in: as after ``python train.py`` (its best checkpoint in place)."""
    folder = tmp_path / "checkpoints" / RUN
    folder.mkdir(parents=True)
    shutil.copy(SHIPPED_CHECKPOINT, folder / "best.ckpt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser(language="python", evaluator=run_alone)],
    patterns=["README.md", "docs/*.md"],
    fixtures=["docs_workspace", "seeded"],  # Sybil's items take no autouse fixtures
).pytest()


@pytest.hookimpl(tryfirst=True)  # before -m selects: a block's marker counts in -m extra
def pytest_collection_modifyitems(items):
    """The tests of an optional extra: a block that needs one is marked ``extra`` as a test is,
    and each is skipped, with its reason, where its extra is missing.

    Then longest first (stable otherwise): the ``slow`` tests, the one marked
    ``slow(longest=True)`` (a wheel built and run) before them, the quick ones last. With ``-n
    auto`` each worker starts on a long test and the short ones fill in at the end, instead of
    one worker running the suite's longest test alone while the other waits."""
    for item in items:
        needs = NEEDS.match(item.example.parsed) if hasattr(item, "example") else None  # a Sybil block
        if needs and needs["what"] in extras.EXTRAS:
            item.add_marker(pytest.mark.extra(needs["what"]))
        for marker in item.iter_markers("extra"):
            if reason := extras.missing(*marker.args):
                item.add_marker(pytest.mark.skip(reason=reason))

    def rank(item) -> int:
        slow = item.get_closest_marker("slow")
        return 2 if slow is None else 0 if slow.kwargs.get("longest") else 1

    items.sort(key=rank)
