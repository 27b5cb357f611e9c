#!/usr/bin/env python3
"""Print README command N (1: install and run the main job; 2: install and run the tests) exactly as
README.md prints it, for .ci/run to run word for word: the command line that follows the comment
``# N. `` in the README's first ``bash`` block (backslash continuations joined). Exits 1, naming
what is missing, where the README has no such command or more than one.

    python3 .ci/readme_command.py 2
"""

from __future__ import annotations

import pathlib
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def first_bash_block(text: str) -> list[str]:
    """The lines of the README's first fenced ``bash`` block."""
    if "```bash\n" not in text:
        raise SystemExit(f"{README}: no ```bash block, so no README command to run")
    return text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()


def readme_command(number: int, text: str) -> str:
    """Command ``number`` of the README's first bash block: the lines after ``# <number>. `` up to
    the next comment or blank line, continuations joined."""
    lines = first_bash_block(text)
    starts = [i for i, line in enumerate(lines) if line.startswith(f"# {number}. ")]
    if len(starts) != 1:
        raise SystemExit(f"{README}: {len(starts)} lines start with '# {number}. ' in its first bash block; "
                         "there must be one, followed by the command")
    command = []
    for line in lines[starts[0] + 1:]:
        if not line.strip() or line.startswith("#"):
            break
        command.append(line.rstrip())
        if not line.rstrip().endswith("\\"):
            break
    if not command:
        raise SystemExit(f"{README}: no command after '# {number}. '")
    return " ".join(part.removesuffix("\\").strip() for part in command)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        raise SystemExit("usage: python3 .ci/readme_command.py N   (1: the main job, 2: the tests)")
    print(readme_command(int(sys.argv[1]), README.read_text()))
