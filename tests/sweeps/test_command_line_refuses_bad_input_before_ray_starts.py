"""``python -m sweeps.paper_grid``'s bad input: one line on stderr and exit code 2, before Ray is
imported (a fresh interpreter shows it), and a --pack-size that cannot be, on its own or with a
search or scheduler that packs do not support."""

import json
import subprocess
import sys

import pytest

from sweeps.paper_grid import main

BAD_INPUT = {
    "unknown_preset": (["--preset", "nope"], "unknown preset 'nope'; choose one of: default"),
    "unknown_scale": (["--scale", "huge"], "unknown scale 'huge' for preset 'default'; choose one of"),
    "unwritable_storage": (["--storage-path", "{file}/sub"], "cannot write to storage path"),
    "unreachable_address": (["--address", "127.0.0.1:1"], "cannot reach Ray at 127.0.0.1:1"),
}


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2_before_ray_starts(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    script = (
        "import json, sys\n"
        "from sweeps.paper_grid import main\n"
        f"cases = {json.dumps({k: v[0] for k, v in BAD_INPUT.items()})}\n"
        "codes = {k: main([a.replace('{file}', sys.argv[1]) for a in argv]) for k, argv in cases.items()}\n"
        "print(json.dumps({'codes': codes, 'ray_imported': 'ray' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(a_file)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": dict.fromkeys(BAD_INPUT, 2), "ray_imported": False}
    errors = done.stderr.strip().splitlines()
    assert len(errors) == len(BAD_INPUT)
    for line, (_, expected) in zip(errors, BAD_INPUT.values()):
        assert line.startswith("error: ") and expected in line


def test_pack_size_is_checked_before_ray_starts(tmp_path, capsys):
    common = ["--scale", "tiny", "--storage-path", str(tmp_path)]
    assert main([*common, "--pack-size", "zero"]) == 2
    assert "--pack-size: must be a whole number >= 1 or 'auto'; got 'zero'" in capsys.readouterr().err
    assert main([*common, "--pack-size", "4", "--scheduler", "asha"]) == 2
    assert "cannot be combined with --search optuna or --scheduler asha" in capsys.readouterr().err
