"""The command lines' --help: every option of ``python -m sweeps.paper_grid`` with its choices and
real defaults, and no empty default shown on any command line."""

import subprocess
import sys


def test_help_documents_every_option():
    done = subprocess.run([sys.executable, "-m", "sweeps.paper_grid", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    for option in ["--preset", "--scale", "--storage-path", "--name", "--seeds", "--resume",
                   "--address", "--cpus-per-trial", "--gpus-per-trial", "--max-concurrent-trials",
                   "--pack-size", "--data-dir", "--data-source", "--search", "--scheduler", "--list",
                   "--dry-run"]:
        assert option in done.stdout
    # every choice is listed, every preset described, and no option says "(default: None)" or False
    assert "--preset {default,montero2021,montero2022,dittadi2021}" in done.stdout
    assert "--scale {tiny,smoke,demo,small,full}" in done.stdout
    assert all(f"\n  {name}: " in done.stdout for name in ("default", "montero2021", "dittadi2021"))
    assert "(default: None)" not in done.stdout and "(default: False)" not in done.stdout
    assert "(default: smoke)" in done.stdout and "(default: 2)" in done.stdout  # real defaults stay
    assert max(len(line) for line in done.stdout.splitlines()) <= 100


def test_the_other_command_lines_show_no_empty_defaults_either():
    from analysis.report import parser as report_parser
    from sweeps.demo import build_parser as demo_parser

    for text in (report_parser().format_help(), demo_parser().format_help()):
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: " in text
