"""Datasets of eval cases, loaded from JSONL or YAML."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

_KEYS = frozenset({"id", "input", "expected", "metadata"})


class DatasetError(ValueError):
    """A dataset file (or the cases given) is not a valid dataset; the message says where."""


def _check_input(_: Any, __: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"Case.input must be a str, got {type(value).__name__}")


def _check_id(_: Any, __: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"Case.id must be a non-empty str or None, got {value!r}")


def _freeze_metadata(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"Case.metadata must be a mapping, got {type(value).__name__}")
    return dict(value)


@attrs.frozen
class Case:
    """One input to run the agent on, with what the answer should be (if known).

    ``expected`` is whatever the expected-aware judges compare with (a string
    for :class:`ExactMatch`, a string or list of strings for :class:`Contains`,
    any JSON value for :class:`JsonEqual`); ``None`` when there is none.
    ``metadata`` is carried into the report untouched. ``id`` names the case
    in reports and comparisons; a :class:`Dataset` numbers the cases without
    one (``case-1``, ``case-2``...), so give ids when cases may be reordered.
    """

    input: str = attrs.field(validator=_check_input)
    expected: Any = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze_metadata)
    id: str | None = attrs.field(default=None, validator=_check_id)


def _number(cases: Iterable[Case]) -> tuple[Case, ...]:  # the converter of Dataset.cases
    out: list[Case] = []
    seen: set[str] = set()
    for i, case in enumerate(cases, 1):
        if not isinstance(case, Case):
            raise TypeError(f"Dataset cases must be Case objects, got {type(case).__name__}")
        if case.id is None:
            case = attrs.evolve(case, id=f"case-{i}")
        assert case.id is not None
        if case.id in seen:
            raise DatasetError(f"two cases have the id {case.id!r}")
        seen.add(case.id)
        out.append(case)
    return tuple(out)


@attrs.frozen
class Dataset:
    """An ordered set of :class:`Case` objects with unique ids.

    Build one from cases (``Dataset([Case("2+2?", expected="4")])``) or load
    a file with :meth:`load` (``.jsonl``, ``.yaml``/``.yml``). Cases without an
    id get ``case-N`` from their position (1-based).
    """

    cases: tuple[Case, ...] = attrs.field(converter=_number)
    name: str = "dataset"

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        """Load ``path`` by its suffix: ``.jsonl`` (one case object per line) or
        ``.yaml``/``.yml`` (a list of cases, or ``{name: ..., cases: [...]}``)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            return cls.from_jsonl(path)
        if suffix in (".yaml", ".yml"):
            return cls.from_yaml(path)
        raise DatasetError(f"{path}: unknown dataset format {suffix!r}; use .jsonl, .yaml or .yml")

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Dataset:
        """One JSON object per line: ``{"input": ..., "expected": ..., "metadata": {...},
        "id": ...}``; blank lines are skipped."""
        path = Path(path)
        text = _read(path)
        cases: list[Case] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise DatasetError(f"{path}:{number}: not JSON: {exc}") from None
            cases.append(_case(record, f"{path}:{number}"))
        return cls._made(cases, path.stem, str(path))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Dataset:
        """A YAML list of case mappings, or a mapping with ``cases`` (and ``name``).

        Needs PyYAML (``pip install pyyaml``), imported only here.
        """
        path = Path(path)
        try:
            import yaml  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            raise DatasetError(
                f"{path}: reading YAML datasets needs PyYAML: pip install pyyaml "
                "(or pip install 'tether[evals]')"
            ) from None
        text = _read(path)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DatasetError(f"{path}: not valid YAML: {exc}") from None
        name = path.stem
        if isinstance(data, Mapping):
            if "cases" not in data:
                raise DatasetError(f"{path}: a YAML mapping needs a 'cases' list")
            name = str(data.get("name") or name)
            data = data["cases"]
        if not isinstance(data, list):
            raise DatasetError(f"{path}: want a list of cases, got {type(data).__name__}")
        cases = [_case(record, f"{path}: case {i}") for i, record in enumerate(data, 1)]
        return cls._made(cases, name, str(path))

    @classmethod
    def _made(cls, cases: Sequence[Case], name: str, where: str) -> Dataset:
        if not cases:
            raise DatasetError(f"{where}: the dataset has no cases")
        try:
            return cls(cases, name=name)
        except DatasetError as exc:
            raise DatasetError(f"{where}: {exc}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it: {exc}") from None


def _case(record: Any, where: str) -> Case:
    if not isinstance(record, Mapping):
        raise DatasetError(f"{where}: a case is an object, got {type(record).__name__}")
    unknown = sorted(set(record) - _KEYS)
    if unknown:
        raise DatasetError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            "a case has input, expected, metadata and id"
        )
    if "input" not in record:
        raise DatasetError(f"{where}: the case has no 'input'")
    case_id: Any = record.get("id")
    if isinstance(case_id, int) and not isinstance(case_id, bool):
        case_id = str(case_id)
    try:
        return Case(
            record["input"],
            expected=record.get("expected"),
            metadata=record.get("metadata") or {},
            id=case_id,
        )
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{where}: {exc}") from None
