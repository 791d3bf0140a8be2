"""The README's test command on a fresh machine: with only the ``dev`` extra installed, every
test module collects and the tests of the optional extras skip, each with the pip command that
adds its extra. Whether a module can be imported is asked of one function,
``swwae.install.importable``, which says no, rather than raising, where a parent package is
missing (``hydra_plugins`` is there only once a Hydra plugin is)."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from helpers.config import ROOT
from helpers.extras import dev_install_lacks, hide_package, missing
from swwae.install import importable, install_extra

# importable


def test_a_module_is_importable_where_it_is_installed_and_not_where_it_is_not():
    assert importable("json") and importable("json.decoder")
    assert not importable("swwae_no_such_module")


def test_a_submodule_of_a_missing_parent_is_not_importable_rather_than_an_error(monkeypatch):
    hide_package(monkeypatch, "hydra_plugins")  # as without any Hydra plugin
    assert not importable("hydra_plugins.hydra_optuna_sweeper")
    assert not importable("swwae_no_such_package.module")
    assert not importable("json.decoder.no_such_module")  # json.decoder is a module, not a package


def test_a_module_hidden_or_imported_without_a_spec_is_answered_as_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "json", None)  # ``import json`` raises here
    assert not importable("json")
    monkeypatch.setitem(sys.modules, "swwae_specless", types.ModuleType("swwae_specless"))  # __spec__ None
    assert importable("swwae_specless")


def test_a_test_of_a_missing_extra_is_skipped_with_the_command_that_adds_it(monkeypatch):
    hide_package(monkeypatch, "hydra_plugins")
    hide_package(monkeypatch, "onnxruntime")  # onnx and onnxscript may be there: one missing is enough
    assert missing("optuna") == 'needs the optuna extra: pip install -e ".[optuna]"'
    assert missing("onnx") == f"needs the onnx extra: {install_extra('onnx')}"
    with pytest.raises(ValueError, match="unknown extra 'onx'"):
        missing("onx")


# the suite without the extras


COLLECT = """
import json, sys
from pathlib import Path

hidden, plugins, out = set(json.loads(sys.argv[1])), json.loads(sys.argv[2]), Path(sys.argv[3])


class Hidden:
    '''One of sys.meta_path's finders, finding nothing of the hidden top-level modules.'''

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        return None if name.partition(".")[0] in hidden else self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


loaded = sorted(hidden & {name.partition(".")[0] for name in sys.modules})
sys.meta_path[:] = [Hidden(finder) for finder in sys.meta_path]
import pytest


class Report:
    problems = []

    def pytest_collectreport(self, report):
        if not report.passed:  # a module that failed, or was skipped whole
            self.problems.append([report.nodeid, report.outcome, str(report.longrepr)[-1500:]])

    def pytest_collection_finish(self, session):
        items = {}
        for item in session.items:
            extra = item.get_closest_marker("extra")
            reasons = [marker.kwargs.get("reason") for marker in item.iter_markers("skip")]
            items[item.nodeid] = [extra.args[0] if extra else None, reasons]
        out.write_text(json.dumps({"loaded": loaded, "problems": self.problems, "items": items}))


args = ["--collect-only", "-qq", "-n", "0", "-p", "no:cacheprovider", *(f"-pno:{name}" for name in plugins)]
sys.exit(pytest.main(args, plugins=[Report()]))
"""


@pytest.mark.slow
def test_every_test_module_collects_without_the_extras_and_their_tests_skip(request, tmp_path):
    """One process collects the whole suite (tests/, README.md, docs/) as on a machine with only
    the dev extra: what only the other extras install is hidden from its imports, their pytest
    plugins are not loaded. No module fails or is skipped whole; every test collected here is
    collected there too, and each test of an extra skips with its extra's pip command. (``pytest
    -m cuda``, scripts/device_check.sh, selects among these same collected tests.)"""
    modules, plugins = dev_install_lacks()
    report = tmp_path / "collected.json"
    args = [json.dumps(sorted(modules)), json.dumps(sorted(plugins)), str(report)]
    result = subprocess.run(
        [sys.executable, "-c", COLLECT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert report.is_file(), (result.stdout + result.stderr)[-4000:]
    collected = json.loads(report.read_text())
    assert collected["problems"] == []  # [module, failed or skipped, why]
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert collected["loaded"] == [], "imported before the finder was in place: cannot be hidden"
    items = collected["items"]
    here = {item.nodeid for item in request.session.items}
    assert sorted(here - set(items)) == []  # none of this session's tests is lost without the extras
    of_extras = {nodeid: found for nodeid, found in items.items() if found[0] is not None}
    assert of_extras, "no test marked extra(...) was collected"
    for nodeid, (extra, reasons) in of_extras.items():
        assert f"needs the {extra} extra: {install_extra(extra)}" in reasons, nodeid
