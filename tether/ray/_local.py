"""The local Ray cluster a :class:`tether.ray.RayRuntime` starts (``address=None``
and no Ray running yet), and stops again, whatever interrupts it.

Two facts of Ray shape this:

* The cluster's GCS and raylet are started with the kernel's fate sharing
  (``PR_SET_PDEATHSIG``), which is bound to the *thread* that started them: if
  that thread ends, they are killed at once, and the processes the raylet
  started (its dashboard and runtime-env agents) are left behind, parent 1.
  So ``ray.init`` runs in a thread of its own that lives as long as the
  cluster, and that thread stops it (``ray.shutdown``).
* The start takes seconds, and a Ctrl-C meanwhile abandons the wait on it. The
  thread then stops the cluster as soon as its start returns, and an ``atexit``
  hook (which runs before the interpreter stops its daemon threads) waits for
  that, so an interrupted start leaves no process behind either.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

import anyio

#: How long the exit of an interrupted process waits for the cluster to stop.
EXIT_WAIT_S = 60.0


def _not_sigterm_warning(record: logging.LogRecord) -> bool:
    """Drop Ray's warning that ``ray.init`` outside the main thread sets no SIGTERM
    handler: that is this module's design (the process's own SIGTERM handling is
    left as the application set it), not a fault worth a line on every start."""
    return not record.getMessage().startswith("SIGTERM handler is not set")


class LocalCluster:
    """``ray.init`` and ``ray.shutdown`` in one thread (see the module docstring)."""

    def __init__(self, init: Callable[[], None], shutdown: Callable[[], None]) -> None:
        self._init, self._shutdown = init, shutdown
        self._stop = threading.Event()
        self._ready = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="tether-ray-cluster", daemon=True)

    def _main(self) -> None:
        ray_worker = logging.getLogger("ray._private.worker")
        ray_worker.addFilter(_not_sigterm_warning)
        try:
            self._init()
        except BaseException as exc:
            self._error = exc
            return
        finally:
            ray_worker.removeFilter(_not_sigterm_warning)
        self._ready = True
        self._stop.wait()
        self._shutdown()

    async def start(self) -> None:
        """Start the cluster; an error of ``ray.init`` raises here."""
        atexit.register(self._at_exit)
        self._thread.start()
        try:
            while self._thread.is_alive() and not self._ready:  # noqa: ASYNC110  (start-up only)
                await anyio.sleep(0.02)
        except BaseException:
            self._stop.set()  # abandoned: the thread stops the cluster once it has started
            raise
        if self._error is not None:
            atexit.unregister(self._at_exit)
            raise self._error

    async def stop(self) -> None:
        """Stop the cluster and wait for it (bounded: the thread is a daemon)."""
        self._stop.set()
        with anyio.move_on_after(EXIT_WAIT_S):
            while self._thread.is_alive():  # noqa: ASYNC110
                await anyio.sleep(0.02)
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        self._stop.set()
        self._thread.join(EXIT_WAIT_S)


__all__ = ["LocalCluster"]
