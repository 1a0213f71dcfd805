"""The row form of a stored run, shared by the SQL run stores (SQLite and PostgreSQL).

Both keep a run as one row of the same columns (:data:`RUN_COLUMNS`), with its
JSON parts as text; :func:`run_of_row` reads such a row back as a
:class:`~._runstore.StoredRun`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._runstore import JSON, Answer, StoredRun, ToolRecord

#: The columns of a tool result's row, in the order :func:`tool_record_of_row` reads them.
TOOL_COLUMNS = "round, call_id, name, arguments, result"
#: The columns of a run's row, in the order :func:`run_of_row` reads them.
RUN_COLUMNS = (
    "run_id, agent, input, messages, parent_run_id, created_at, status, owner, "
    "lease_expires_at, previous_owner, checkpoint, events, result, cancel, stop, pending, answers, "
    "epoch"
)

#: JSON text for the stores' writes. Made once: ``json.dumps`` with options builds
#: an encoder on every call.
encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr).encode


def decode_json(text: str | None) -> JSON:
    """The value of a JSON column (``None`` for SQL NULL)."""
    return None if text is None else json.loads(text)


def run_of_row(row: Sequence[Any]) -> StoredRun:
    """A run's row (:data:`RUN_COLUMNS`) as a :class:`StoredRun`."""
    answers = tuple(
        Answer(call_id=a[0], approved=bool(a[1]), note=a[2]) for a in json.loads(row[16])
    )
    return StoredRun(
        run_id=row[0],
        agent=row[1],
        input=row[2],
        messages=json.loads(row[3]),
        parent_run_id=row[4],
        created_at=float(row[5]),
        status=row[6],
        owner=row[7],
        lease_expires_at=None if row[8] is None else float(row[8]),
        previous_owner=row[9],
        checkpoint=decode_json(row[10]),
        events=int(row[11]),
        result=decode_json(row[12]),
        cancel=row[13],
        stop=bool(row[14]),
        pending=tuple(json.loads(row[15])),
        answers=answers,
        epoch=int(row[17]),
    )


def tool_record_of_row(row: Sequence[Any]) -> ToolRecord:
    """A recorded tool result's row (:data:`TOOL_COLUMNS`)."""
    return ToolRecord(
        round=int(row[0]),
        call_id=row[1],
        name=row[2],
        arguments=row[3],
        result=decode_json(row[4]),
    )


def renewal_epochs(ids: Sequence[str], epochs: Sequence[int] | None) -> list[int] | None:
    """A renewal's epochs, one per run id (``None``: not checked); a ``ValueError`` if the
    counts differ."""
    if epochs is None:
        return None
    fences = [int(epoch) for epoch in epochs]
    if len(fences) != len(ids):
        raise ValueError(f"renew() got {len(fences)} epochs for {len(ids)} run ids")
    return fences
