"""python -m router_latency and the console script router-latency: the command line, started
as the one file starts it, its interrupt handler installed before the tool loads."""

import signal
import sys


def run() -> None:
    """Run the command line as a program: an interrupt while the package loads exits 130 with
    no traceback, as one at the top of the one file does; from main() on the commands handle
    it (the package's __init__ imports only its constants, so little runs before this)."""
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(130))
    from router_latency.cli import console_main
    console_main()


if __name__ == "__main__":
    run()
