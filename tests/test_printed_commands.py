"""Every shell command printed in README.md and docs/*.md works as printed, so that none can rot.

The commands are the lines of the fenced ``bash``/``sh``/``shell`` blocks (and, in ``console`` and
unlabelled blocks, which otherwise hold output, trees and synopses, the lines after a ``$ ``
prompt), with backslash continuations joined, comments dropped and ``&&``/``;`` lists split into
their commands. Bash expands each as the reader's shell would (``set -u``: a variable the page
never exported is an error), with the page's own ``export`` lines applied in order. Then:

* every ``python -m MODULE`` of this repository, and ``python cluster/iam/*.py``, is parsed by the
  module's own argparse parser (a renamed or removed option fails here), also where it is the
  quoted command of ``ray exec``/``ray job submit`` that runs on the cluster;
* the commands that run offline in seconds (:data:`RUNS`) are run, page by page in the order
  printed, in a temporary folder with a temporary HOME, and must exit 0 (two sweeps, the README's
  command 1 and its grid-file example, with ``--dry-run`` added: their plans, checked in full);
* the others are not run, each for the reason :func:`not_run` gives (network, AWS, a cluster, a
  server that runs until stopped, or a sweep of minutes to days); a command this file cannot
  classify fails the test, so a new printed command is looked at once.

Inline commands in running text (single backticks) are not covered: many are synopses
(``NAME [--to DIR]``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"bash", "sh", "shell", "console", ""}

# Each repository module a page runs with ``python -m``, and the function that builds its parser.
PARSERS = {
    "sweeps.paper_grid": "build_parser",
    "sweeps.demo": "build_parser",
    "data_pipeline.prepare": "build_parser",
    "data_pipeline.show": "build_parser",
    "data_pipeline.download": "build_parser",
    "analysis.report": "parser",
    "cluster/iam/create_profiles.py": "build_parser",
    "cluster/iam/create_bucket.py": "build_parser",
    "cluster/iam/create_security_group.py": "build_parser",
}


@dataclass(frozen=True)
class Printed:
    page: str  # README.md, docs/cluster.md
    line: int  # where the command starts on the page
    text: str  # one command, as printed (continuations joined, comment dropped)

    def __str__(self):
        return f"{self.page}:{self.line}: {self.text}"


def _split(line: str) -> list[str]:
    """The commands of one shell line: split at ``&&``, ``||`` and ``;`` outside quotes, and cut
    at a comment (an unquoted ``#`` after a space)."""
    parts, current, quote, i = [], "", None, 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (not current or current[-1].isspace()):
            break
        elif line.startswith(("&&", "||"), i) or c == ";":
            parts.append(current)
            current, i = "", i + (1 if c == ";" else 2)
            continue
        current += c
        i += 1
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def printed_commands(page: Path) -> list[Printed]:
    """The commands of ``page``'s fenced shell blocks, in order."""
    found, lines = [], page.read_text().splitlines()
    name = page.relative_to(ROOT).as_posix()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        i += 1
        if not fence:
            continue
        indent, language = len(fence.group(1)), fence.group(2)
        block = []
        while i < len(lines) and lines[i].strip() != "```":
            block.append((i + 1, lines[i][indent:]))
            i += 1
        i += 1
        if language not in SHELL_BLOCKS:
            continue
        prompted = language in ("console", "")
        pending, start = "", 0
        for number, text in block:
            if not pending:
                if text.startswith("$ "):
                    text = text[2:]
                elif prompted:
                    continue  # output, a tree or a synopsis
                start = number
            if text.rstrip().endswith("\\"):
                pending += text.rstrip()[:-1] + " "
                continue
            whole, pending = pending + text, ""
            found += [Printed(name, start, part) for part in _split(whole)]
    return found


def expand(command: str, env: dict, cwd: Path) -> list[str]:
    """The words bash makes of ``command`` (``set -u``), without running it."""
    done = subprocess.run(["bash", "-c", 'set -u; words() { printf "%s\\0" "$@"; }; words ' + command],
                          env=env, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"bash cannot expand {command!r}: {done.stderr.strip()}"
    return done.stdout.split("\0")[:-1]


def _assignments(words: list[str]) -> tuple[dict, list[str]]:
    """(``NAME=value`` words before the command, the command's words)."""
    settings = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, value = words[0].split("=", 1)
        settings[name] = value
        words = words[1:]
    return settings, words


def _reader_env(home: Path, extra: dict | None = None) -> dict:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    return {**env, **(extra or {})}


def page_commands(page: Path, home: Path = Path("/home/you"), cwd: Path = ROOT):
    """[(printed, words, the page's exports so far)] of ``page``, the exports applied in order."""
    exports, out = {}, []
    for printed in printed_commands(page):
        settings, words = _assignments(expand(printed.text, _reader_env(home, exports), cwd))
        if words[:1] == ["export"]:
            for word in words[1:]:
                name, value = word.split("=", 1)
                exports[name] = value
        out.append((printed, {**settings, "__words__": words}, dict(exports)))
    return out


def disgen_command(words: list[str]) -> tuple[str, list[str]] | None:
    """(module, its arguments) if ``words`` run one of :data:`PARSERS`' modules or scripts."""
    if words[:2] == ["python", "-m"] and len(words) > 2 and words[2] in PARSERS:
        return words[2], words[3:]
    if words[:1] == ["python"] and len(words) > 1 and words[1] in PARSERS:
        return words[1], words[2:]
    return None


def nested_disgen_commands(words: list[str]) -> list[tuple[str, list[str]]]:
    """The disgen commands inside a quoted word: ``ray exec cluster.yaml "cd ~/disgen && python -m
    ..."``, ``ray job submit ... -- bash -c "..."``, as the remote shell splits them."""
    found = []
    for word in words[1:]:
        if "python " not in word:
            continue
        for part in _split(word):
            command = disgen_command(shlex.split(part))
            if command:
                found.append(command)
    return found


def parse(module: str, arguments: list[str]):
    """``arguments`` parsed by the module's own parser; a pytest failure naming what it refused."""
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(module).stem, ROOT / module)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    else:
        loaded = importlib.import_module(module)
    parser = getattr(loaded, PARSERS[module])()
    try:
        return parser.parse_args(arguments)
    except SystemExit as exit_:
        pytest.fail(f"{module} refuses {shlex.join(arguments)} (exit {exit_.code}; its stderr above)")


# --- what runs, and why the rest does not ------------------------------------------------------------

README_GRID = "# my_grid.yaml"


def _tiny_results(workspace: Path) -> None:
    """A few finished models' rows in ./disgen_results/default: what command 1 leaves, in small."""
    sys.path.insert(0, str(ROOT / "tests"))
    from report_rows import trial

    from analysis.storage import write_results

    folder = workspace / "disgen_results" / "default"
    if not (folder / "trials.parquet").exists():
        write_results(folder, [trial(f"{split}-k{i}", split, "beta_vae", 0.1 * i, 80 + 5 * i)
                               for i in range(4) for split in ("blank_side", "leave1out")])


def _readme_grid(workspace: Path) -> None:
    """The README's my_grid.yaml, written where the command after it reads it."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```yaml\n" + README_GRID + "\n", 1)[1].split("```", 1)[0]
    (workspace / "my_grid.yaml").write_text(README_GRID + "\n" + block)


def _sweeps_page(workspace: Path) -> None:
    (workspace / "docs").mkdir(exist_ok=True)
    shutil.copy(ROOT / "docs" / "sweeps.md", workspace / "docs" / "sweeps.md")


def _sweeps_page_unchanged(workspace: Path) -> None:
    assert (workspace / "docs" / "sweeps.md").read_text() == (ROOT / "docs" / "sweeps.md").read_text()


def _models_page(workspace: Path) -> None:
    (workspace / "docs").mkdir(exist_ok=True)
    shutil.copy(ROOT / "docs" / "models.md", workspace / "docs" / "models.md")


def _models_page_unchanged(workspace: Path) -> None:
    assert (workspace / "docs" / "models.md").read_text() == (ROOT / "docs" / "models.md").read_text()


def _token_written(workspace: Path) -> None:
    assert (workspace / "home" / ".ray" / "auth_token").read_text().strip()


def _token_private(workspace: Path) -> bool:
    return (workspace / "home" / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600


# command as printed → (setup before it, extra arguments that make it fast, check after it, cwd)
RUNS = {
    # the README's command 1, a real sweep of 3-4 minutes: its plan only (the sweep's own tests run it)
    "python -m sweeps.paper_grid": (None, ["--dry-run"], None, None),
    "python -m sweeps.paper_grid --preset dittadi2021 --scale full --gpus-per-trial 1 --dry-run":
        (None, [], None, None),
    "python -m sweeps.paper_grid --grid my_grid.yaml --seeds 3": (_readme_grid, ["--dry-run"], None, None),
    "python -m data_pipeline.show dsprites --split blank_side --out split.png":
        (None, [], lambda w: (w / "split.png").stat().st_size > 0, None),
    "python -m analysis.report ./disgen_results/default":
        (_tiny_results, [], lambda w: (w / "disgen_results/default/report.html").exists(), None),
    'python -c "from models.config import write_settings_table; write_settings_table()"':
        (_models_page, [], _models_page_unchanged, None),
    'python -c "from sweeps.options import write_options_table; write_options_table()"':
        (_sweeps_page, [], _sweeps_page_unchanged, None),
    "ray get-auth-token --generate": (None, [], _token_written, None),
    "chmod 600 ~/.ray/auth_token": (None, [], _token_private, None),
    "ruff check .": (None, [], None, ROOT),
}

CLUSTER = ("needs the AWS cluster (ray up) or its dashboard: tests/sweeps/test_cluster_commands.py "
           "checks it with Ray's own command line, tests/end_to_end/test_cluster.py "
           "runs the job commands on a local head with token authentication; its disgen command is "
           "parsed here")
NOT_RUN = [  # (the command's first words, why it is not run here); first match
    (["pip"], "installs from the package index (network); .ci/run installs as the README says"),
    (["python", "-m", "pytest"], "the test suite itself (CI runs it), or a tutorial's own new test files"),
    (["ray", "get-auth-token"], None),  # run (RUNS)
    (["ray"], CLUSTER),
    (["aws"], "needs AWS"),
    (["tensorboard"], "a server that runs until stopped"),
    (["mlflow", "ui"], "a server that runs until stopped (and needs the full mlflow package)"),
    (["wandb", "login"], "asks for an API key over the network"),
    (["python", "cluster/iam/"], "changes an AWS account (tests/sweeps/test_cluster_yaml.py runs it "
                                 "against moto); parsed here"),
    (["python", "-m", "sweeps.demo"], "45 minutes of sweeps; parsed here"),
    (["python", "-m", "data_pipeline.download"], "downloads from the network; parsed here"),
    (["python", "-m", "data_pipeline.prepare"], "writes to S3 on a cluster (--address auto); parsed here"),
    (["python", "-m", "sweeps.paper_grid"], "a sweep (minutes to days, some on a cluster, on real "
                                            "files or logging to MLflow/W&B); parsed here"),
]


def not_run(text: str, words: list[str]) -> str | None:
    """Why a printed command is not run here; None if it is run (:data:`RUNS`) or only sets a variable."""
    if text in RUNS or words[:1] == ["export"]:
        return None
    for first, reason in NOT_RUN:  # the last word matches as a prefix (python cluster/iam/...)
        head = words[:len(first)]
        if head[:-1] == first[:-1] and len(head) == len(first) and head[-1].startswith(first[-1]):
            if reason is None:
                break
            return reason
    raise AssertionError(f"{text!r}: neither run (RUNS) nor listed with a reason (NOT_RUN); classify it")


def _all():
    return [entry for page in PAGES for entry in page_commands(page)]


ALL = _all()


def _disgen_cases():
    cases = []
    for printed, settings, _ in ALL:
        words = settings["__words__"]
        for module, arguments in filter(None, [disgen_command(words), *nested_disgen_commands(words)]):
            cases.append(pytest.param(module, arguments, id=f"{printed.page}:{printed.line}:{module}"))
    return cases


# --- the tests ------------------------------------------------------------------------------------------

def test_the_commands_are_found_and_each_is_run_or_has_a_reason():
    assert len(ALL) >= 40
    assert {p.page for p, _, _ in ALL} >= {"README.md", "docs/cluster.md", "docs/sweeps.md"}
    for printed, settings, _ in ALL:
        not_run(printed.text, settings["__words__"])  # a reason, or in RUNS, or an export
    run = [p for p, _, _ in ALL if p.text in RUNS]
    assert len(run) >= 8, run
    printed_texts = {p.text for p, _, _ in ALL}
    assert not set(RUNS) - printed_texts, f"RUNS names commands no page prints: {set(RUNS) - printed_texts}"


@pytest.mark.parametrize("module, arguments", _disgen_cases())
def test_each_disgen_command_parses_with_its_own_parser(module, arguments):
    parse(module, arguments)


def test_the_parse_check_catches_a_renamed_option():
    with pytest.raises(pytest.fail.Exception, match="--gpus-per-gpu"):
        parse("sweeps.paper_grid", ["--preset", "dittadi2021", "--gpus-per-gpu", "1"])
    words = expand('ray exec cluster.yaml "cd ~/disgen && python -m sweeps.paper_grid --adress auto"',
                   _reader_env(Path("/home/you")), ROOT)
    ((module, arguments),) = nested_disgen_commands(words)
    with pytest.raises(pytest.fail.Exception, match="--adress"):
        parse(module, arguments)
    with pytest.raises(AssertionError, match="unbound variable"):
        expand("python -m sweeps.paper_grid --storage-path s3://$NOT_EXPORTED/x", _reader_env(ROOT), ROOT)


def _pages_that_run():
    return [page for page in PAGES
            if any(printed.text in RUNS for printed in printed_commands(page))]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("page", _pages_that_run(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_offline_commands_run_as_printed_in_order(page, tmp_path):
    """Each page's runnable commands, in the order printed, in one folder (the reader's), with the
    page's exports so far; HOME is a folder of the test's (``ray get-auth-token`` writes there)."""
    home = tmp_path / "home"
    home.mkdir()
    import matplotlib

    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    base.update(HOME=str(home), MPLCONFIGDIR=os.environ.get("MPLCONFIGDIR") or matplotlib.get_configdir(),
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    ran = []
    for printed, settings, exports in page_commands(page, home, tmp_path):
        if printed.text not in RUNS or printed.text in ran:  # a command printed twice runs once
            continue
        setup, faster, check, cwd = RUNS[printed.text]
        if printed.text.startswith("ruff") and shutil.which("ruff") is None:
            continue  # the test extra installs it; CI runs it anyway
        if setup:
            setup(tmp_path)
        words = [*settings["__words__"], *faster]
        program = sys.executable if words[0] == "python" else shutil.which(words[0])
        assert program, f"{printed}: {words[0]} is not installed"
        env = {**base, **exports, **{k: v for k, v in settings.items() if k != "__words__"}}
        done = subprocess.run([program, *words[1:]], cwd=cwd or tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, f"{printed}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if check:
            assert check(tmp_path) is not False, f"{printed}: ran, but did not do what the page says"
        ran.append(printed.text)
    assert ran
