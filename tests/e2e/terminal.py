"""A command run as on a user's terminal: a pseudo-terminal 120 columns wide (a new one is 0 columns wide,
where a progress bar draws nothing at all), drained as the command writes, so that a long bar never blocks
it on a full terminal. Shared by the e2e tests of what a terminal shows."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading
from pathlib import Path
from typing import Mapping, Sequence

ROWS, COLUMNS = 40, 120


def on_a_terminal(command: Sequence[str], cwd: Path, env: Mapping[str, str], everything: bool = False,
                  timeout: float = 300) -> tuple[int, str, str]:
    """Run `command` with its stderr on a pseudo-terminal and its stdout a pipe (as `| jq` would have it),
    or with `everything` its stdin, stdout and stderr all on the terminal (as a command typed at a prompt):
    the exit code, what stdout received ("" with `everything`), and everything the terminal showed."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    shown = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the command ended and closed its side
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    streams = ({"stdin": terminal, "stdout": terminal} if everything
               else {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE})
    try:
        done = subprocess.run(list(command), cwd=cwd, env=dict(env), stderr=terminal, timeout=timeout, **streams)
    finally:
        os.close(terminal)
        reader.join(timeout=10)
        os.close(controller)
    return done.returncode, (done.stdout or b"").decode(errors="replace"), shown.decode(errors="replace")
