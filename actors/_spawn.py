"""``spawn``: ``TaskGroup.start_soon`` without anyio's per-task extras.

Since anyio 4.14 every ``start_soon`` wraps the task's coroutine in a
``TaskHandle``: one more coroutine frame, an ``anyio.Event``, and a cancel
scope of its own that the task enters and exits (on trio an anyio scope
around a trio scope, with its ``CancelStatus``). tether never uses the
handle, and a run starts two tasks (its supervisor and its model actor) and
more on use, so per parked run that is a tenth of what it holds.

:func:`spawn` starts the task the way the task group did before handles:

- **trio**: straight into the group's nursery (``Nursery.start_soon``). The
  task is the nursery's child like any other; cancellation and errors
  propagate as trio does it.
- **asyncio**: an ``asyncio.Task`` registered with the group exactly as
  anyio's own spawn registers one (its task state, the group's cancel scope,
  the group's task set) and a done-callback doing what anyio's does: forget
  the task, wake the group when it was the last, and record an error
  (cancelling the group).

Anything else falls back to ``start_soon``, so the helper is never less
correct than anyio: an anyio release outside :data:`CHECKED_ANYIO` (the
minor versions whose internals this was checked against; a newer one may
change them without notice), a task group lacking the attributes relied on,
another backend, a task group not made by anyio. The test suite runs every
path of the actors on both backends over it.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from anyio import CancelScope
from anyio.abc import TaskGroup

#: The anyio minor versions (major, minor) whose task-group internals :func:`spawn`
#: was checked against; with any other, it is ``start_soon``. Widen it only after
#: reading the new release's ``TaskGroup.start_soon`` and running the test suite.
CHECKED_ANYIO = frozenset({(4, 16)})


def _anyio_checked() -> bool:
    import importlib.metadata  # once, on the first spawn: not at ``import tether``

    try:
        major, minor = importlib.metadata.version("anyio").split(".")[:2]
        return (int(major), int(minor)) in CHECKED_ANYIO
    except (importlib.metadata.PackageNotFoundError, ValueError):  # pragma: no cover
        return False


#: Whether the installed anyio is one of CHECKED_ANYIO; looked up on first use.
_CHECKED: bool | None = None


def anyio_checked() -> bool:
    """Whether the installed anyio is one of :data:`CHECKED_ANYIO` (found on first use)."""
    global _CHECKED
    if _CHECKED is None:
        _CHECKED = _anyio_checked()
    return _CHECKED


def _trio_spawner(tg: Any) -> Callable[..., None] | None:
    nursery = getattr(tg, "_nursery", None)
    start_soon = getattr(nursery, "start_soon", None)
    if start_soon is None or not hasattr(tg, "_check_active"):
        return None
    tg._check_active()
    return start_soon  # type: ignore[no-any-return]


def _asyncio_internals() -> tuple[Any, Any] | None:
    try:
        from anyio._backends._asyncio import TaskState, _task_states
    except ImportError:  # pragma: no cover (another anyio)
        return None
    return TaskState, _task_states


_ASYNCIO: tuple[Any, Any] | None = None
_ASYNCIO_FIELDS = ("_tasks", "_exceptions", "_on_completed_fut", "cancel_scope", "_entered")
#: The task-group classes whose instances were found to have every one of _ASYNCIO_FIELDS.
_FIT: set[type] = set()
_PY314 = sys.version_info >= (3, 14)
#: What :func:`spawn` starts: a coroutine function.
TaskFunc = Callable[..., Coroutine[Any, Any, Any]]


def _asyncio_done(tg: Any, task: Any) -> None:
    """What anyio's ``task_done`` does for a task started without a status or handle."""
    import asyncio

    assert _ASYNCIO is not None
    states = _ASYNCIO[1]
    host = tg.cancel_scope._host_task
    if _PY314 and host is not None:  # pragma: no cover (Python 3.14)
        asyncio.future_discard_from_awaited_by(task, host)  # type: ignore[attr-defined]
    state = states.pop(task)
    state.cancel_scope._tasks.remove(task)
    tg._tasks.remove(task)
    done = tg._on_completed_fut
    if done is not None and not tg._tasks and not done.done():
        done.set_result(None)
    try:
        exc = task.exception()
    except asyncio.CancelledError as cancelled:
        while isinstance(cancelled.__context__, asyncio.CancelledError):
            cancelled = cancelled.__context__
        exc = cancelled
    if exc is not None:
        if not isinstance(exc, asyncio.CancelledError):
            tg._exceptions.append(exc)
        if not tg.cancel_scope._effectively_cancelled:
            tg.cancel_scope.cancel()


#: The context every :class:`_Done` callback runs in (see :func:`_spawn_asyncio`).
_DONE_CONTEXT = contextvars.Context()


class _Done:
    """A task's done-callback: :func:`_asyncio_done` for its group.

    Not a ``functools.partial``: anyio formats the cancelling task's repr into every
    cancel reason, and asyncio's repr of a task looks up the source of each
    partial among its callbacks; a plain callable is formatted by its repr alone.
    """

    __slots__ = ("_tg",)

    def __init__(self, tg: Any) -> None:
        self._tg = tg

    def __call__(self, task: Any) -> None:
        _asyncio_done(self._tg, task)


def _spawn_asyncio(tg: Any, func: TaskFunc, args: tuple[Any, ...], name: str) -> bool:
    global _ASYNCIO
    if _ASYNCIO is None:
        _ASYNCIO = _asyncio_internals()
    if _ASYNCIO is None:
        return False
    if type(tg) not in _FIT:  # checked once per task-group class, not per task
        if not all(hasattr(tg, f) for f in _ASYNCIO_FIELDS):
            return False
        _FIT.add(type(tg))
    scope = tg.cancel_scope
    if not tg._entered or not scope._active:
        return False  # let start_soon raise its own error
    import asyncio

    task_state, states = _ASYNCIO
    coro = func(*args)
    task = asyncio.get_running_loop().create_task(coro, name=name)
    states[task] = task_state(parent_id=id(scope._host_task), cancel_scope=scope)
    scope._tasks.add(task)
    tg._tasks.add(task)
    if _PY314 and scope._host_task is not None:  # pragma: no cover (Python 3.14)
        asyncio.future_add_to_awaited_by(task, scope._host_task)  # type: ignore[attr-defined]
    # In a context of its own, shared: without one asyncio copies the spawner's context
    # for every task's callback (a tracked object a task holds for its life). The callback
    # reads no context variable, and the loop never runs two callbacks nested.
    task.add_done_callback(_Done(tg), context=_DONE_CONTEXT)
    return True


def spawn(tg: TaskGroup, func: TaskFunc, *args: Any, name: str) -> None:
    """``tg.start_soon(func, *args, name=name)``, without anyio's per-task handle."""
    module = type(tg).__module__
    if not (_CHECKED or (_CHECKED is None and anyio_checked())):
        pass
    elif module == "anyio._backends._trio":
        start_soon = _trio_spawner(tg)
        if start_soon is not None:
            start_soon(func, *args, name=name)
            return
    elif module == "anyio._backends._asyncio" and _spawn_asyncio(tg, func, args, name):
        return
    tg.start_soon(func, *args, name=name)


def cancel_scope(scope: CancelScope, reason: str) -> None:
    """``scope.cancel(reason)``, without formatting the calling task's repr on asyncio.

    anyio's asyncio scope writes ``by <the current task>`` into its cancel reason,
    and asyncio's repr of a task formats its coroutine, its source line and each
    done-callback: about 15% of what cancelling a parked run cost. Here the reason
    reads ``Cancelled via cancel scope <id>; reason: <reason>`` and the rest is
    what ``cancel`` does (drop the deadline's timer, mark the scope, deliver the
    cancellation). Outside a checked anyio release, another backend, or a scope
    lacking the attributes relied on: ``scope.cancel(reason)``.
    """
    if (
        (_CHECKED or (_CHECKED is None and anyio_checked()))
        and type(scope).__module__ == "anyio._backends._asyncio"
        and hasattr(scope, "_deliver_cancellation")
    ):
        s: Any = scope
        if s._cancel_called:
            return
        if s._timeout_handle:
            s._timeout_handle.cancel()
            s._timeout_handle = None
        s._cancel_called = True
        s._cancel_reason = f"Cancelled via cancel scope {id(s):x}; reason: {reason}"
        if s._host_task is not None:
            s._deliver_cancellation(s)
        return
    scope.cancel(reason)


__all__ = ["cancel_scope", "spawn"]
