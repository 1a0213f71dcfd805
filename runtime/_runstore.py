"""The run store protocol: what a durable run keeps, how owners share it (docs/guides/durable.md).

**This module is the contract for every run store**: :class:`SQLiteRunStore`
(:mod:`._sqliteruns`) and ``tether.postgres.PostgresRunStore`` implement
:class:`RunStore` to the letter of the docstrings below, and both pass the same
conformance suite (``tests/runstore_contract.py``). A change here is additive.

The store speaks JSON-ready values only (``dict``, ``list``, ``str``, numbers,
``None``): events as :func:`tether.events.dump` makes them, checkpoints as
:func:`~._state.dump_state` makes them, results and tool results as the runtime
makes them. A store never interprets them beyond the few keys named here
(an event's ``"seq"``).

The life of a stored run::

    create ──► running ──commit*──► finished          (finish)
                 │  ▲                                  ▲
                 │  └─claim── ready ◄─answer─ parked ──┘ (finish, after a claim)
                 └──park────────────────────────┘

* **Ownership.** A ``running`` run has one owner (a Runtime's ``owner`` id)
  holding a **lease** until ``lease_expires_at`` (seconds since the epoch,
  the store's clock: wall clock for SQLite, the server's for PostgreSQL).
  Every write an owner makes (:meth:`~RunStore.commit`,
  :meth:`~RunStore.record_tool`, :meth:`~RunStore.park`,
  :meth:`~RunStore.finish`) checks, in the same transaction, that the run
  is ``running`` and owned by that owner *and that its lease has not expired*;
  otherwise it changes nothing and raises :class:`LeaseLost`. An owner that lost
  its run stops working on it.
* **Fencing.** Every run has a lease **epoch**, an integer that grows with
  each owner: :meth:`~RunStore.create` records epoch 1, and every
  :meth:`~RunStore.claim` raises it by one (:attr:`Claim.epoch`). An owner's
  write that carries ``epoch=`` (the runtime's always do) is also refused with
  :class:`LeaseLost` when the stored epoch differs, in the same transaction as
  the owner check: a write from an earlier ownership never lands, even one of
  the same owner id. ``epoch=None`` skips that one check (callers from before
  epochs). Runs stored before epochs existed have epoch 0 until claimed.
* **Exactly one claimer.** :meth:`~RunStore.claim` is a compare-and-set in
  one transaction: of any number of concurrent claimers of one run (tasks,
  threads, processes, machines on the same store), at most one gets a
  :class:`Claim`; the others get ``None``. A run is claimable when it is
  ``running`` with an expired lease (its owner died or released it), or
  ``ready`` (a parked run whose pending calls are all answered, or that was
  asked to cancel). A claim makes the claimer the owner, status ``running``.
* **Events.** Appended in ``seq`` order, gap-free from 0: each write's first
  event must have ``seq`` equal to :attr:`StoredRun.events` (the count stored so
  far) and the next ones follow by one; anything else is a ``ValueError`` and
  nothing is written. Events are only ever appended, never changed.
* **Atomicity.** Each method is one transaction: all of its effects or none.
* **Control.** :meth:`~RunStore.request` records a cancel or stop request for
  whoever owns the run; the owner sees it in the :class:`Control` that
  :meth:`~RunStore.commit` and :meth:`~RunStore.renew` return.
* **Following.** :meth:`~RunStore.wait` returns once the run has more events
  than a reader has seen, or has finished, or a timeout passed; a store may
  poll (SQLite, every ``poll_s``) or be woken (PostgreSQL's LISTEN/NOTIFY).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from tether.providers import TetherError

#: ``running``: owned (or claimable once its lease expired); ``parked``: waiting for
#: approvals, unowned; ``ready``: parked and answered (or cancelled), claimable;
#: ``finished``: has its result.
RunStatus = Literal["running", "parked", "ready", "finished"]

#: A JSON-ready value (see the module docstring).
JSON = Any


class RunStoreError(TetherError):
    """The run store could not be read or written."""


class RunNotFound(TetherError, KeyError):
    """No run has that id: not in flight in this Runtime, and not in its run store.

    A ``KeyError`` too (``except KeyError`` keeps working); its ``str`` is the
    message itself, without the quotes ``KeyError`` adds.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class RunStoreUnavailable(RunStoreError):
    """A store fault that may pass: a lost connection, a busy, locked or full file.

    The runtime tries the operation again with backoff, for as long as the
    run's lease would last (:mod:`._storeretry`); a store raises it only when
    trying again may help. Whether a write that raised it took effect is
    unknown: the runtime's retries treat it so (see :mod:`._storeretry`).
    """


class LeaseLost(RunStoreError):
    """The writer does not own the run (any more): its lease expired or another claimed it.

    Nothing was written. The Runtime stops working on the run.
    """


@attrs.frozen(kw_only=True)
class NewRun:
    """What :meth:`RunStore.create` records when a run starts."""

    run_id: str
    #: The agent's name: the Runtime that resumes the run finds the agent by it.
    agent: str
    #: The input's text form.
    input: str
    #: The messages the run starts from, dumped (history, conversation, the first
    #: user message with its parts); deps are never stored.
    messages: list[JSON] = attrs.field(factory=list)
    parent_run_id: str | None = None
    created_at: float = 0.0


@attrs.frozen(kw_only=True)
class Answer:
    """A host's answer to one parked tool call."""

    call_id: str
    approved: bool
    note: str | None = None


@attrs.frozen(kw_only=True)
class StoredRun:
    """A run as the store holds it (:meth:`RunStore.get`)."""

    run_id: str
    agent: str
    input: str
    messages: list[JSON]
    parent_run_id: str | None
    created_at: float
    status: RunStatus
    #: The owner holding the lease (``None`` when parked, ready, finished or released).
    owner: str | None
    lease_expires_at: float | None
    #: The owner before the current one, set by :meth:`RunStore.claim`.
    previous_owner: str | None
    #: The last checkpoint (``dump_state``), or ``None`` before the first.
    checkpoint: JSON | None
    #: How many events are stored: the next event's ``seq``.
    events: int
    #: The result once finished.
    result: JSON | None
    #: A cancel request's reason, once one was made.
    cancel: str | None
    stop: bool
    #: The parked calls' ids (in the model's order), and the answers so far.
    pending: tuple[str, ...] = ()
    answers: tuple[Answer, ...] = ()
    #: The lease epoch (the fencing token): 1 at create, one more at every claim.
    epoch: int = 0


@attrs.frozen(kw_only=True)
class Claim:
    """A successful :meth:`RunStore.claim`: the run as it was claimed."""

    run: StoredRun
    previous_owner: str | None

    @property
    def epoch(self) -> int:
        """The claimer's lease epoch (its fencing token): its writes carry it."""
        return self.run.epoch


@attrs.frozen(kw_only=True)
class Control:
    """What the owner of a run should know at a boundary (:meth:`RunStore.commit`, renew)."""

    run_id: str
    #: The run is no longer this owner's (see :class:`LeaseLost`); only from renew.
    lost: bool = False
    cancel: str | None = None
    stop: bool = False


NO_CONTROL = Control(run_id="")


@attrs.frozen(kw_only=True)
class ToolRecord:
    """A finished tool call's result, recorded as soon as it finished.

    A resumed run uses it instead of executing the call again: matched by
    ``call_id`` in any round of the run (with the same ``name`` and
    ``arguments``), else by ``name`` and ``arguments`` (canonical JSON) within
    the round being redone; each record used once.
    """

    round: int
    call_id: str
    name: str
    arguments: str
    result: JSON


@runtime_checkable
class RunStore(Protocol):
    """Where durable runs are kept (see the module docstring: the contract)."""

    async def create(self, run: NewRun, *, owner: str, lease_s: float) -> None:
        """Record a new ``running`` run owned by ``owner`` (lease ``now + lease_s``),
        at epoch 1.

        A ``ValueError`` if a run with that id exists (nothing changes).
        """
        ...

    async def get(self, run_id: str) -> StoredRun | None:
        """The run, or ``None`` if the store has no run of that id."""
        ...

    async def commit(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        checkpoint: Mapping[str, JSON] | None,
        lease_s: float,
        epoch: int | None = None,
    ) -> Control:
        """A round boundary: append ``events``, replace the checkpoint (if given),
        renew the lease to ``now + lease_s``; one transaction.

        :class:`LeaseLost` if ``owner`` does not hold an unexpired lease on the
        run, or ``epoch`` is given and is not the run's; a ``ValueError`` on a
        ``seq`` gap or overlap. Returns the pending control requests (``lost``
        is always false here).
        """
        ...

    async def record_tool(
        self, run_id: str, *, owner: str, record: ToolRecord, epoch: int | None = None
    ) -> None:
        """Keep a finished tool call's result (replacing one of the same round and call id).

        :class:`LeaseLost` as for :meth:`commit`.
        """
        ...

    async def tool_records(self, run_id: str, round: int | None = None) -> list[ToolRecord]:
        """The tool records of ``round`` (of every round if ``None``), in the order
        they were recorded."""
        ...

    async def park(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        checkpoint: Mapping[str, JSON],
        pending: Sequence[str],
        epoch: int | None = None,
    ) -> None:
        """Park a run waiting for approval of the calls ``pending`` (non-empty).

        Appends ``events``, replaces the checkpoint, sets status ``parked``
        with those pending call ids and no answers, and releases the lease
        (owner ``None``); one transaction. :class:`LeaseLost` and
        ``ValueError`` as for :meth:`commit`. A cancel requested before the
        park makes the run ``ready`` at once.
        """
        ...

    async def answer(self, run_id: str, answer: Answer) -> bool:
        """Record a host's answer to a parked run's pending call.

        ``True`` when this answer was the last one missing: the run became
        ``ready`` (of concurrent answers, exactly one returns ``True``).
        ``KeyError`` if the run is unknown or not parked, or the call is not
        one of its pending calls; ``ValueError`` if the call was answered
        already. Nothing changes on an error.
        """
        ...

    async def finish(
        self,
        run_id: str,
        *,
        owner: str,
        events: Sequence[Mapping[str, JSON]],
        result: Mapping[str, JSON],
        epoch: int | None = None,
    ) -> None:
        """End the run: append ``events`` (``RunFinished`` last), store ``result``,
        status ``finished``, release the lease, drop the tool records; one transaction.

        :class:`LeaseLost` and ``ValueError`` as for :meth:`commit`.
        """
        ...

    async def renew(
        self,
        owner: str,
        run_ids: Sequence[str],
        *,
        lease_s: float,
        epochs: Sequence[int] | None = None,
    ) -> list[Control]:
        """Extend ``owner``'s leases on ``run_ids`` to ``now + lease_s``; one transaction.

        One :class:`Control` per run id, in order: ``lost`` when the run is
        not ``running`` under an unexpired lease of ``owner``, or (``epochs``
        given: one per run id, in order) at another epoch (then nothing of it
        changed), else its pending requests. A ``ValueError`` if ``epochs`` and
        ``run_ids`` differ in length.
        """
        ...

    async def release(self, run_id: str, *, owner: str) -> None:
        """Give up ``owner``'s lease now: the run stays ``running`` and is claimable at once.

        Nothing happens if ``owner`` does not hold it.
        """
        ...

    async def claimable(self, *, limit: int = 100) -> list[str]:
        """Ids of claimable runs (see the module docstring), oldest first, at most ``limit``."""
        ...

    async def claim(self, run_id: str, *, owner: str, lease_s: float) -> Claim | None:
        """Take a claimable run: owner ``owner``, lease ``now + lease_s``, status
        ``running``, its epoch one more than before (:attr:`Claim.epoch`).

        ``None`` if the run is unknown or not claimable; of concurrent
        claimers at most one gets the :class:`Claim`. The claim's
        ``previous_owner`` is the owner whose lease expired (``None`` for a
        ready run).
        """
        ...

    async def request(self, run_id: str, *, cancel: str | None = None, stop: bool = False) -> None:
        """Ask the run's owner to cancel (with reason ``cancel``) or stop.

        Kept until the run finishes. A parked run asked to cancel becomes
        ``ready``. ``KeyError`` if the run is unknown; nothing happens to a
        finished run.
        """
        ...

    async def events(self, run_id: str, *, start: int = 0) -> list[JSON]:
        """The stored events with ``seq >= start``, in ``seq`` order."""
        ...

    async def wait(self, run_id: str, *, seen: int, timeout_s: float) -> None:
        """Return once the run has more than ``seen`` events stored or has finished,
        or after ``timeout_s``, whichever comes first (never raises on the timeout).
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources (a later call may reopen them)."""
        ...


__all__ = [
    "JSON",
    "NO_CONTROL",
    "Answer",
    "Claim",
    "Control",
    "LeaseLost",
    "NewRun",
    "RunStatus",
    "RunStore",
    "RunStoreError",
    "RunStoreUnavailable",
    "StoredRun",
    "ToolRecord",
]
