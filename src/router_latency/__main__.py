"""python -m router_latency and the console script router-latency: the command line, started
as the one file starts it, its interrupt handler installed before the tool loads."""

import gc
import os
import signal


def run() -> None:
    """Run the command line as a program: an interrupt while the package loads exits 130 with
    no traceback, as one at the top of the one file does; from main() on the commands handle
    it (the package's __init__ imports only its constants, so little runs before this)."""
    # os._exit, not sys.exit: nothing is written yet, and a SystemExit raised by a handler
    # while Python compiles a module (the package's, where no bytecode is cached) is lost:
    # the interrupted command then ran on to the end and exited 0 (9 of 40 SIGINTs at 35-70 ms)
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))
    # no garbage collection while the package loads: the collections its records and
    # functions set off free next to nothing; what loading made lives as long as the process
    # and is frozen, never looked through again (the one file does the same)
    gc.disable()
    from router_latency.cli import console_main
    gc.freeze()
    gc.enable()
    console_main()


if __name__ == "__main__":
    run()
