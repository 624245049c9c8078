"""python -m router_latency: the command line, as the one file runs it."""

import signal
import sys

if __name__ == "__main__":  # as early as a package allows: an interrupt while the rest loads
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(130))  # exits 130

from router_latency.cli import console_main  # noqa: E402

if __name__ == "__main__":
    console_main()
