"""Open an HTML file in headless Chromium (Debian's ``chromium``) and read back what the page's
own check script wrote onto ``<body>``, and every console message."""

import re
import shutil
import subprocess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def dump_dom(path, profile) -> str:
    """The page's DOM after its scripts ran."""
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
               "--dump-dom", path.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180).stdout


def open_page(path, profile) -> dict:
    """{"images_total", "images_ok", "script_errors", "console": [lines]} of the page at ``path``."""
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
               "--dump-dom", path.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    body = re.search(r"<body[^>]*>", result.stdout)
    assert body, result.stderr[-2000:]
    found = {name: re.search(rf'data-{name}="(\d+)"', body.group(0))
             for name in ("images-total", "images-ok", "script-errors")}
    assert all(found.values()), body.group(0)
    return {"images_total": int(found["images-total"].group(1)),
            "images_ok": int(found["images-ok"].group(1)),
            "script_errors": int(found["script-errors"].group(1)),
            "console": [line for line in result.stderr.splitlines() if ":CONSOLE" in line]}
