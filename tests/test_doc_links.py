"""The README's and the docs pages' relative links lead somewhere: the file exists and, for a
``#anchor``, the page has that heading (``mkdocs build --strict`` checks the pages too, but not
the README, which is not part of the site)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from helpers.docs import PAGES, ROOT, code_blocks

LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and mkdocs make it."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def anchors(page: Path) -> set[str]:
    text = page.read_text()
    for block in code_blocks(pages=[page]):  # a '# comment' in a code block is no heading
        text = text.replace(block.source, "")
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path) -> list[str]:
    text = page.read_text()
    for block in code_blocks(pages=[page]):
        text = text.replace(block.source, "")
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_leads_to_a_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: {file.name} has no heading #{anchor}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


FENCE = re.compile(r"\s*```")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_code_fence_stands_alone_on_its_line(page):
    """A fence is three backticks and at most a language: one followed by prose does not close its
    block, and the rest of the page would show as code (it once swallowed half of configs.md)."""
    lines = page.read_text().splitlines()
    bad = [
        f"line {i}: {line}"
        for i, line in enumerate(lines, 1)
        if FENCE.match(line) and not re.fullmatch(r"\s*```[\w+-]*", line)
    ]
    assert not bad, f"{page.name}: " + "; ".join(bad)


REST = re.compile(r":(class|func|meth|mod|attr|obj|exc):`|::\n")


def test_the_api_reference_pages_docstrings_are_markdown_not_rest():
    """mkdocstrings reads docstrings as Markdown (``docstring_style: google``): a reST role or a
    ``::`` before a code block would show on the page as written."""
    targets = re.findall(r"^::: ([\w.]+)", (ROOT / "docs" / "api.md").read_text(), re.M)
    files = set()
    for target in targets:
        module, _, name = target.rpartition(".")
        try:
            obj = importlib.import_module(target)
        except ImportError:
            obj = getattr(importlib.import_module(module), name)
        documented = obj if inspect.ismodule(obj) or inspect.isroutine(obj) or inspect.isclass(obj) else None
        files.add(Path(inspect.getsourcefile(documented or importlib.import_module(module))))
    found = [f"{f.relative_to(ROOT)}: {m.group(0)!r}" for f in sorted(files) for m in REST.finditer(f.read_text())]
    assert targets and not found, found


def test_every_file_the_architecture_guide_names_exists():
    """The "To add or change" table of docs/architecture.md sends the next engineer to files by
    path: each must be there (a placeholder such as ``<mode>`` names a pattern, not a file)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("| To add or change |") :].split("\n\n")[0]
    paths = set(re.findall(r"`((?:swwae|configs|tests|scripts|docs)/[^`\s]*)`", table))
    assert len(paths) > 20, paths
    named = [p for p in sorted(paths) if "<" not in p]
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, missing


DOTTED = re.compile(r"\bswwae(?:\.\w+)+")


def resolves(name: str) -> bool | None:
    """Whether ``name`` is a module of swwae or an attribute of one; None where importing it needs
    a package that is not installed (an optional extra's)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as err:
            if err.name == ".".join(parts[:i]):  # no such module: perhaps an attribute of a shorter one
                continue
            return None
        except ImportError:  # a module of an extra that is not installed says so (swwae.hub)
            return None
        try:
            for attribute in parts[i:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_swwae_name_in_the_readme_and_docs_exists():
    """A page that tells readers to call ``swwae.training.run.keep_freed_memory()`` after it moved
    to ``swwae.training.process`` sends them to an AttributeError: every dotted name resolves."""
    names = {name.rstrip(".") for page in PAGES for name in DOTTED.findall(page.read_text())}
    assert len(names) > 30, names
    assert not [name for name in sorted(names) if resolves(name) is False]
