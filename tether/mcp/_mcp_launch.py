"""Runs an MCP stdio server so that it dies with the process that started it.

``tether.mcp`` starts a stdio server as
``python -I -S _mcp_launch.py HOST_PID COMMAND ARGS...``, in a process group
of its own (the SDK's ``start_new_session``). This launcher:

* asks Linux to send it ``SIGUSR1`` when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``); elsewhere it looks at its parent every
  :data:`POLL_S` seconds instead, and so it does on Linux once the signal came
  for the end of the host's *thread* that started it (trio starts processes
  from worker threads, which end when idle) while the host lives on. If the
  host is already gone, it stops at once;
* runs the server as its child, in its group, on the same stdin, stdout and
  stderr (it never reads or writes them itself), and exits as the server
  exits, with its status;
* when the host dies (even ``SIGKILL``, with the server blocked in a call),
  ends the whole group: ``SIGTERM``, then ``SIGKILL`` after :data:`GRACE_S`.
  The server's own children (``npx``'s ``node``, say) go with it, which a
  parent-death signal set on the server alone would not do (it is not
  inherited across ``fork``).

The host closes a server as the SDK does (its stdin, then the group), so a
clean close goes through the launcher untouched. It is a file run by path with
``-I -S`` (no ``site``, no environment variables read), standard library only:
it starts in a few milliseconds and imports nothing of tether.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from types import FrameType

#: The signal the kernel sends the launcher when the host dies (Linux).
PARENT_DIED = signal.SIGUSR1
#: How long the server's group has, after SIGTERM, before SIGKILL.
GRACE_S = 2.0
#: How often the launcher looks at its parent where Linux's signal is not available.
POLL_S = 0.5

_PR_SET_PDEATHSIG = 1


def _watch_parent() -> bool:
    """Ask for :data:`PARENT_DIED` when the parent dies; whether the kernel took it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(PARENT_DIED), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _end_group(child: int | None) -> None:
    """End the server and everything in this group, then this launcher."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is not for us
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while child is not None and time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        time.sleep(0.02)
    try:
        os.killpg(0, signal.SIGKILL)  # this launcher too
    finally:
        os._exit(137)


def _status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class _ThreadEnded(Exception):
    """The host's thread that started the launcher ended, not the host."""


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: _mcp_launch.py HOST_PID COMMAND [ARGS...]\n")
        return 2
    host, command = int(argv[1]), argv[2:]
    child: int | None = None

    def parent_died(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != host:
            _end_group(child)
        # Linux signals when the *thread* that forked the launcher ends: trio starts
        # processes from a worker thread, which ends when idle. The host lives on:
        # watch it by polling from now on.
        raise _ThreadEnded

    # Held until the loop, where it can be handled: none may land half-way through the fork.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {PARENT_DIED})
    signal.signal(PARENT_DIED, parent_died)
    watched = _watch_parent()
    if os.getppid() != host:  # the host died before the watch was set
        _end_group(None)
    child = os.fork()
    if child == 0:  # the server: default signal handling, then the command
        signal.signal(PARENT_DIED, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(2, f"tether: cannot start the MCP server {command[0]!r}: {exc}\n".encode())
        os._exit(127)
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a held signal lands here
            done, status = os.waitpid(child, 0 if watched else os.WNOHANG)
            if done:
                return _status(status)
            if os.getppid() != host:
                _end_group(child)
            time.sleep(POLL_S)
        except ChildProcessError:
            return 0
        except _ThreadEnded:
            watched = False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
