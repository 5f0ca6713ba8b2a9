"""JSON files the harness reads back (golden manifests, run.json, verdict.json, spec.json,
outputs.json): a user can damage any of them by hand or by a bad merge. One that parses
but holds another kind of value (`[]`, `null`) or other fields must be an error naming
the file and what it should hold, as unparsable JSON is; never an AttributeError or a
TypeError far from the file. Standard library only: engine ranks read their brief with it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
# A decoded JSON object: string keys, values of any JSON type (what read_json returns for
# dict, and the records the harness writes: verdict fields, run.json, spec.json)
JSONObject = dict[str, Any]
_EXPECTED: dict[type, str] = {dict: "a JSON object ({...})", list: "a JSON array ([...])"}


def read_json(path: str | Path, shape: type = dict) -> Any:
    """The JSON value in file `path`, which must be a `shape` (dict or list). OSError when
    it cannot be read; ValueError naming the file when it is not JSON or not a `shape`."""
    try:
        data = json.loads(Path(path).read_text())
    except ValueError as exc:  # UnicodeDecodeError too
        raise ValueError(f"{path} is not JSON ({exc})") from None
    if not isinstance(data, shape):
        raise ValueError(f"{path} holds {_kind(data)} where {_EXPECTED[shape]} is expected")
    return data


def from_fields(cls: type[T], data: JSONObject, what: str) -> T:
    """The dataclass `cls` from `data`; ValueError starting with `what` (e.g. "FILE is not a
    verdict") naming the unknown and the missing fields, where `cls(**data)` would raise
    a bare TypeError."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    unknown = sorted(set(data) - {f.name for f in fields})
    missing = [
        f.name
        for f in fields
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if unknown or missing:
        problems = [f"unexpected field{'s' * (len(unknown) > 1)} {_names(unknown)}"] if unknown else []
        problems += [f"missing field{'s' * (len(missing) > 1)} {_names(missing)}"] if missing else []
        raise ValueError(f"{what}: {'; '.join(problems)}")
    return cls(**data)


def _names(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _kind(value: Any) -> str:
    if value is None:
        return "JSON null"
    kinds = {
        bool: "a JSON true/false",
        str: "a JSON string",
        int: "a JSON number",
        float: "a JSON number",
        list: "a JSON array",
        dict: "a JSON object",
    }
    return kinds.get(type(value), type(value).__name__)
