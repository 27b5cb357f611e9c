"""docs/design.md's step-by-step sections, as the tests that follow them literally read them
(``tests/models/test_adding_a_setting.py``, ``tests/sweeps/test_adding_a_sweep_option.py``)."""

from __future__ import annotations

import pathlib
import re

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "design.md"


def steps(heading: str) -> dict[str, str]:
    """The code blocks of the page's section ``## <heading>`` that follow an ``<!-- label -->``,
    by label."""
    text = PAGE.read_text()
    section = text[text.index(f"## {heading}"):]
    section = section[:section.index("\n## ", 1)]
    return dict(re.findall(r"<!-- ([^>]+?) -->\n```[a-z]*\n(.*?)```", section, re.S))


def after_declaration(lines: list[str], name: str) -> int:
    """The index of the line after ``name``'s declaration in a dataclass body (four spaces in;
    it may span lines)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"    {name}: "))
    depth, end = 0, start
    while True:
        depth += lines[end].count("(") - lines[end].count(")")
        end += 1
        if depth == 0:
            return end
