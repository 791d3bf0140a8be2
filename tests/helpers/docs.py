"""The code blocks of the README and of docs/*.md, found by Sybil's Markdown lexer (not by
heading names: a page can be reshaped without breaking a test). ``conftest.py`` at the root
runs the Python blocks; tests that cover a shell command or a printed line read it here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sybil import Document
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = re.compile(r"\A\s*# needs: *(?P<what>[\w-]+)")  # a block's first line: what it needs to run


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str  # "" for a fence without one
    source: str

    def needs(self) -> str | None:
        """What the block needs that CI may not have (``# needs: internet`` on its first line)."""
        found = NEEDS.match(self.source)
        return found["what"] if found else None


def code_blocks(language: str | None = None, pages=PAGES) -> list[Block]:
    """Every fenced block of ``pages`` (in ``language``, if named), in page order."""
    found = []
    for page in pages:
        document = Document(page.read_text(), str(page))
        for region in FencedCodeBlockLexer(language=r"[\w+-]*")(document):
            if language is None or region.lexemes["language"] == language:
                line = document.text.count("\n", 0, region.start) + 1
                found.append(Block(page, line, region.lexemes["language"], str(region.lexemes["source"])))
    return found


def shell_commands(prefix: str, pages=PAGES) -> list[str]:
    """The lines of the pages' bash blocks that start with ``prefix``, comments cut off."""
    lines = (line.split(" #")[0].strip() for block in code_blocks("bash", pages) for line in block.source.splitlines())
    return [line for line in lines if line.startswith(prefix)]
