"""Every axis of the matrix, declared once, and the rules between axes as data.

An axis is a field of `RunAxes` below: its name, kind, default and values are declared
there and nowhere else. Schema validation (a value outside an axis's domain is refused
when the scenario file is read), scenario ids, engine binding, `unsupported_reason` and
the covering-array planner all read these declarations. An engine reads a run's axes
through the typed view (`RunAxes.of(settings)`, `RunBrief.axes`), never by string.

Kinds:
    size    a number of ranks, an integer >= 1 (tp, pp, dp)
    budget  a non-negative integer, 0 meaning off (chunked_prefill's tokens per step)
    switch  true or false
    choice  one of a fixed list of values, the first the default (`false` meaning off)

A rule between axes says which settings make no sense (`requires`, `excludes`), with the
reason a user reads when a scenario is refused or a covering array leaves a combination
out. RULES are facts of the axes themselves, for every engine; an engine declares its
own limits the same way (`Engine.rules`), with the source its reason cites.

An engine may declare axes of its own beyond these (a plugin's `Engine.axes`): they are
judged by the values the engine lists, and spelt in ids by the generic rule below.
Stdlib only: ranks import it inside an engine's own interpreter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, Union, cast

Value = Union[bool, int, str]  # bool first: YAML `true` stays a bool
V = TypeVar("V")

SIZE, BUDGET, SWITCH, CHOICE = "size", "budget", "switch", "choice"


def _axis(
    kind: str,
    default: Value,
    doc: str,
    values: tuple[Value, ...] = (),
    omit: tuple[Value, ...] = (),
    layout: bool = False,
    ranks: bool = False,
) -> Any:  # a dataclass field, which stands as the value of the attribute it declares (int, bool, str)
    """A field of RunAxes that declares an axis: `values` the domain of a choice, `omit`
    the values an id leaves out besides the generic rule (`dp: 1`: no data parallelism).
    `layout`: how one model is split and run, what a first suite sweeps (the other axes test a
    feature on a model or workloads made for it); `ranks`: it says which ranks hold a module's
    work, what a localization names."""
    meta = {"kind": kind, "doc": doc, "values": values, "omit": omit, "layout": layout, "ranks": ranks}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunAxes:
    """A run's axes, typed, every one at its default unless set (the view engines read)."""

    tp: int = _axis(SIZE, 1, "tensor parallelism: ranks a layer's weights are split over", layout=True, ranks=True)
    pp: int = _axis(SIZE, 1, "pipeline parallelism: stages the layers are split into", layout=True, ranks=True)
    dp: int = _axis(
        SIZE, 1, "data parallelism: replicas, each a whole tp x pp engine serving its share of prompts", omit=(1,), ranks=True
    )
    sp: bool = _axis(SWITCH, False, "sequence parallelism: activations split over the TP ranks by token", layout=True)
    compile: bool = _axis(SWITCH, False, "the model's forward compiled (torch.compile, graphs captured at warm-up)", layout=True)
    kvc: bool = _axis(SWITCH, False, "a KV connector: prefix KV saved to and loaded from an external store")
    ep: bool = _axis(SWITCH, False, "expert parallelism: a mixture-of-experts model's experts split over ranks", ranks=True)
    prefix_cache: bool = _axis(SWITCH, False, "automatic prefix caching: KV blocks of earlier prompts reused")
    block_size: int = _axis(BUDGET, 0, "tokens per KV cache block (0: the engine's own)")
    chunked_prefill: int = _axis(BUDGET, 0, "chunked prefill: a token budget per step (0: off)")
    batch: str = _axis(
        CHOICE,
        "all",
        "how a workload's prompts are submitted (harness/contract/batching.py)",
        values=("all", "one", "mixed"),
        # every prompt in one call is what an engine does unasked: an id leaves it out like
        # a switch that is off, so a suite that adds the axis keeps its other ids
        omit=("all",),
    )
    spec: Union[bool, str] = _axis(
        CHOICE, False, "speculative decoding: ngram drafts, or a draft model's", values=(False, "ngram", "draft")
    )
    batch_invariant: bool = _axis(SWITCH, False, "a batch-invariant mode: results must not depend on the batch")

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> RunAxes:
        """The declared axes of `settings` (others, an engine's own, are left out)."""
        return cls(**{name: settings[name] for name in AXIS_NAMES if name in settings})

    @property
    def world(self) -> int:
        """Ranks of one run: every DP replica a whole tp x pp engine."""
        return self.dp * self.tp * self.pp

    def value(self, name: str) -> Value:
        return cast(Value, getattr(self, name))


@dataclass(frozen=True)
class Axis:
    """One axis's declaration, as read from its RunAxes field."""

    name: str
    kind: str
    default: Value
    doc: str
    values: tuple[Value, ...] = ()
    omit: tuple[Value, ...] = ()
    layout: bool = False
    ranks: bool = False

    @property
    def evidence_key(self) -> str:
        """Where engines report whether it applied (EngineOutputs meta `applied`)."""
        return self.name

    def domain_text(self) -> str:
        """What the axis takes, as a refusal says it."""
        if self.kind == SIZE:
            return f"{self.name} is a parallel size, an integer >= 1"
        if self.kind == BUDGET:
            return f"{self.name} is a budget, an integer >= 0 (0: off)"
        if self.kind == SWITCH:
            return f"{self.name} is a switch, true or false"
        return f"{self.name} takes {', '.join(spell(v) for v in self.values)}"

    def problem(self, value: object) -> str | None:
        """Why `value` is not a value of this axis (with the ones it takes), or None."""
        if self.kind in (SIZE, BUDGET):
            low = 1 if self.kind == SIZE else 0
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        elif self.kind == SWITCH:
            ok = isinstance(value, bool)
        else:
            ok = is_one_of(value, self.values)
        return None if ok else f"axis '{self.name}' value {value!r}: {self.domain_text()}"

    def is_on(self, value: Value) -> bool:
        """A value other than the axis's default: the feature switched on, the size grown."""
        return value != self.default

    def label(self, value: Value) -> str:
        """The value's part of a scenario id ('' when the id leaves it out)."""
        if is_one_of(value, self.omit):
            return ""
        return generic_label(self.name, value)


def generic_label(name: str, value: object) -> str:
    """ints as <axis><n>, true bools by name, a string as <axis>-<value>; false bools and
    zero ints (an axis switched off) are left out, so adding an axis keeps the other ids."""
    if isinstance(value, bool):
        return name if value else ""
    if isinstance(value, int):
        return f"{name}{value}" if value else ""
    return f"{name}-{value}"


def same_value(a: object, b: object) -> bool:
    """Equal and of one type: YAML's `true` is not the size 1, nor `0` a switch's false."""
    return type(a) is type(b) and a == b


def is_one_of(value: object, values: Iterable[object]) -> bool:
    return any(same_value(value, v) for v in values)


def spell(value: object) -> str:
    """A value as a scenario file writes it: `false`, `2`, `ngram`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


AXES: dict[str, Axis] = {f.name: Axis(f.name, default=cast(Value, f.default), **f.metadata) for f in fields(RunAxes)}
AXIS_NAMES = tuple(AXES)
PARALLEL_SIZES = tuple(a.name for a in AXES.values() if a.kind == SIZE)
LAYOUT_AXES = tuple(a.name for a in AXES.values() if a.layout)
RANK_AXES = tuple(a.name for a in AXES.values() if a.ranks)


class _Namer:
    """Stands in for a RunAxes to axis_name: each field read gives the field's name."""

    def __getattr__(self, name: str) -> str:
        if name not in AXES:
            raise AttributeError(f"no axis {name!r} is declared")
        return name


def axis_name(pick: Callable[[RunAxes], object]) -> str:
    """An axis's name where code must key something by it (a probe's answer, an evidence
    entry), spelt as a typed read so a checker sees a wrong one: `axis_name(lambda a: a.sp)`."""
    return cast(str, pick(cast(RunAxes, _Namer())))


def named(settings: Mapping[str, object]) -> tuple[str, ...]:
    """The declared axes `settings` names (a suite's matrix axes; the others are at their
    defaults), in declaration order."""
    return tuple(name for name in AXIS_NAMES if name in settings)


def kept_unchanged(settings: Mapping[str, V], axes: RunAxes) -> dict[str, V]:
    """`settings` less the declared axes whose value `axes` changes: what a scenario narrows
    to when those go back to the golden's (`replace(axes, compile=False)`: the eager twin)."""
    return {a: v for a, v in settings.items() if a not in AXES or same_value(axes.value(a), v)}


def default(name: str) -> Value | None:
    """A declared axis's default (None for an engine's own axis)."""
    return AXES[name].default if name in AXES else None


def filled(settings: Mapping[str, object]) -> dict[str, object]:
    """`settings` with every declared axis it leaves out at its default."""
    return {**{name: a.default for name, a in AXES.items()}, **settings}


# ---- rules between axes ---------------------------------------------------------------

_COND = re.compile(r"(?P<axis>[a-z][a-z0-9_]*)(?:(?P<op>>=|<=|==|!=|=|<|>)(?P<value>[a-z0-9._-]+))?")


@dataclass(frozen=True)
class Cond:
    """`sp` (on: not its default), `tp>=2`, `spec=draft`, `chunked_prefill<256`."""

    axis: str
    op: str = "on"
    value: Value | None = None

    @classmethod
    def parse(cls, text: str) -> Cond:
        m = _COND.fullmatch(text.replace(" ", ""))
        if not m:
            raise ValueError(f"not a condition on an axis: {text!r}")
        if m["op"] is None:
            return cls(m["axis"])
        raw = m["value"]
        value: Value = int(raw) if raw.isdigit() else {"true": True, "false": False}.get(raw, raw)
        return cls(m["axis"], "==" if m["op"] == "=" else m["op"], value)

    def holds(self, settings: Mapping[str, object]) -> bool:
        value = settings.get(self.axis, default(self.axis))
        if self.op == "on":
            return value != default(self.axis) and value is not None
        if self.op in ("==", "!="):
            same = same_value(value, self.value)
            return same if self.op == "==" else not same
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        assert isinstance(self.value, int)
        return {">=": value >= self.value, "<=": value <= self.value, ">": value > self.value, "<": value < self.value}[self.op]

    def __str__(self) -> str:
        return self.axis if self.op == "on" else f"{self.axis}{'=' if self.op == '==' else self.op}{spell(self.value)}"


@dataclass(frozen=True)
class Rule:
    """`requires`: where `when` holds, one of `then` must. `excludes`: `when` and `then[0]`
    never hold together. `reason` is what a refused scenario says."""

    kind: str  # "requires" | "excludes"
    when: Cond
    then: tuple[Cond, ...]
    reason: str

    def broken(self, settings: Mapping[str, object]) -> bool:
        """Whether `settings` (axes missing: at their defaults) break this rule."""
        if not self.when.holds(settings):
            return False
        if self.kind == "requires":
            return not any(c.holds(settings) for c in self.then)
        return self.then[0].holds(settings)

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.when.axis, *(c.axis for c in self.then)]))

    def __str__(self) -> str:
        joined = " or ".join(map(str, self.then))
        return f"{self.when} {self.kind} {joined}"

    def message(self) -> str:
        return f"{self}: {self.reason}"


def requires(when: str, *alternatives: str, reason: str) -> Rule:
    return Rule("requires", Cond.parse(when), tuple(Cond.parse(a) for a in alternatives), reason)


def excludes(one: str, other: str, reason: str) -> Rule:
    return Rule("excludes", Cond.parse(one), (Cond.parse(other),), reason)


# Facts of the axes, whatever the engine.
RULES: tuple[Rule, ...] = (
    requires("sp", "tp>=2", reason="sequence parallelism splits tokens over the TP ranks: with one there is no split"),
)


def broken_rule(settings: Mapping[str, object], rules: tuple[Rule, ...] | list[Rule]) -> Rule | None:
    """The first of `rules` that `settings` break, or None."""
    return next((r for r in rules if r.broken(settings)), None)
