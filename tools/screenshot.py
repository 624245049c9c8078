#!/usr/bin/env python3
"""Render a report page to PNG with headless Chromium, the way a person opens it.

    python3 tools/screenshot.py report.html report.png [--width 1280] [--height 2400]

Needs Debian's `chromium` package (apt-get install -y chromium). Not a test: it shows the page
as a browser draws it, to be looked at. Chromium runs offline here: no network, no profile,
no updates, a fresh user-data folder that is removed afterwards.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="the HTML file")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2400)
    parser.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    page = Path(args.page).resolve()
    if not page.is_file():
        print(f"screenshot: no such file: {page}", file=sys.stderr)
        return 2
    profile = tempfile.mkdtemp(prefix="screenshot-profile-")
    try:
        command = [args.browser, "--headless", "--no-sandbox", "--disable-gpu",
                   "--disable-quic", "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--screenshot={Path(args.png).resolve()}",
                   f"--window-size={args.width},{args.height}", page.as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0 or not Path(args.png).is_file():
        print(f"screenshot: chromium exited {done.returncode}:\n{done.stderr[-2000:]}",
              file=sys.stderr)
        return 1
    print(f"wrote {args.png} ({Path(args.png).stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
