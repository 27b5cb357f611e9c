"""Every command that cluster.yaml's header, the README's cluster section and docs/cluster.md tell a
user to type works as printed: bash expands it as the user's shell would (with only
``DISGEN_BUCKET`` set, as the README says), Ray's own command line accepts its options, nothing
meant for the user's shell reaches the cluster unexpanded, and every sweep it starts parses with
disgen's own parser and joins the cluster (``--address auto``), but for a ``--dry-run``, which runs
no Ray."""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "my-lab-disgen"


def _joined(lines: list[str]) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    commands, current = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            commands.append(current.strip())
        current = ""
    return commands


def header_commands() -> list[str]:
    """The commands in cluster.yaml's header comment (the lines indented under '#')."""
    lines = []
    for line in (ROOT / "cluster.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        if line.startswith("#   "):
            lines.append(line[4:])
    return _joined(lines)


def readme_cluster_commands() -> list[str]:
    """The commands in the README's 'On a cluster' section's bash blocks and in docs/cluster.md's."""
    text = (ROOT / "README.md").read_text()
    sections = [text.split("## On a cluster", 1)[1].split("\n## ", 1)[0],
                (ROOT / "docs" / "cluster.md").read_text()]
    lines = []
    for section in sections:
        for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
            lines += [line.strip() for line in block.splitlines()]
    return _joined(lines)


def as_the_shell_expands(command: str, environment: dict) -> list[str]:
    """The words bash makes of ``command`` (quotes removed, variables filled in from ``environment``
    alone), without running it; a comment after the command is dropped as bash drops it."""
    done = subprocess.run(["bash", "-c", 'words() { printf "%s\\0" "$@"; }; words ' + command],
                          env={"PATH": "/usr/bin:/bin", **environment}, capture_output=True, text=True,
                          check=True)
    return done.stdout.split("\0")[:-1]


def _ray_command(words: list[str]):
    """(click command, its arguments) of a ``ray ...`` command line."""
    from ray.scripts.scripts import cli

    command, rest = cli, words[1:]
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


def _sweeps_in(remote: str) -> list[list[str]]:
    """The ``python -m sweeps.paper_grid`` commands in a shell string run on the cluster, as the
    remote shell splits them (with nothing of the user's environment there)."""
    found = []
    for part in re.split(r"&&|;", remote):
        words = as_the_shell_expands(part, {"HOME": "/home/ray"})
        if words[:3] == ["python", "-m", "sweeps.paper_grid"]:
            found.append(words[3:])
    return found


def check_sweep(arguments: list[str], where: str) -> None:
    from sweeps.paper_grid import build_parser

    args = build_parser().parse_args(arguments)  # exits 2 on an unknown option
    if args.dry_run:  # the plan, printed on the laptop before the cluster starts: no Ray at all
        return
    assert args.address == "auto", f"{where}: a sweep on the cluster needs --address auto"
    if args.storage_path.startswith("s3://"):
        assert args.storage_path.startswith(f"s3://{BUCKET}/"), f"{where}: the bucket was not filled in"


def check(command: str) -> int:
    """Check one command; returns the number of sweeps it starts."""
    words = as_the_shell_expands(command, {"DISGEN_BUCKET": BUCKET, "HOME": "/home/me"})
    if not words or words[0] != "ray":
        if words[:3] == ["python", "-m", "sweeps.paper_grid"]:
            check_sweep(words[3:], command)
            return 1
        return 0
    click_command, rest = _ray_command(words)
    context = click_command.make_context(" ".join(words[:2]), list(rest))  # refuses unknown options
    remote = []
    if click_command.name == "exec":
        remote = [context.params["cmd"]]
    elif click_command.name == "submit":
        entrypoint = list(context.params["entrypoint"])
        remote = [entrypoint[2]] if entrypoint[:2] == ["bash", "-c"] else [shlex.join(entrypoint)]
    sweeps = 0
    for text in remote:
        assert "$" not in text, f"{command}: {text!r} would reach the cluster with a variable unexpanded"
        for arguments in _sweeps_in(text):
            check_sweep(arguments, command)
            sweeps += 1
    return sweeps


def test_the_commands_are_found():
    assert len(header_commands()) >= 6 and len(readme_cluster_commands()) >= 8


@pytest.mark.parametrize("command", header_commands() + readme_cluster_commands())
def test_each_command_works_as_printed(command):
    check(command)


def test_both_places_start_a_sweep_on_the_cluster():
    assert sum(check(c) for c in header_commands()) >= 1
    assert sum(check(c) for c in readme_cluster_commands()) >= 2


@pytest.mark.parametrize("broken, why", [
    ('ray exec cluster.yaml "cd ~/disgen && python -m sweeps.paper_grid --storage-path s3://$DISGEN_BUCKET/x"',
     "--address auto"),
    ("ray job submit --address http://localhost:8265 -- bash -c 'python -m sweeps.paper_grid "
     "--storage-path s3://$DISGEN_BUCKET/x --address auto'", "unexpanded"),
    ('ray exec cluster.yaml --no-such-option "ls"', "no-such-option"),
])
def test_the_checks_catch_what_the_issue_found(broken, why):
    with pytest.raises((AssertionError, Exception), match=re.escape(why)):
        check(broken)
