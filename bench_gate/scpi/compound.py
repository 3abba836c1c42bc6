"""A snapshot's fields read in one message: the gateway renders their queries as one compound
query message and splits the one response message back, where the profile says the
instrument answers so (``compound_queries``).

IEEE 488.2 §7.4.1 lets one program message carry several query message units joined by
``;``; the device answers each in order, the response message units joined by ``;`` in one
response message (§8.4.1). Every unit is written from the root (a leading ``:``, SCPI-99
§6.2.4), so no unit is read under the header path the one before it left.

Only number and boolean fields read by a query of their own (no register bits), and text
fields the profile says answer one word (``word``), join: their answers (numbers,
§8.7.2-§8.7.4, or words, character data §8.7.1) hold no ``;``, so the answers split back one
to one, and each is then normalized as a separate answer would be: garbage (a word field's
answer that is not one word included) fails closed. Any other text field's answer may hold a
``;`` (string data), so it is asked alone. ``*IDN?`` comes last (its answer is arbitrary
ASCII response data, allowed only as a response message's last element, §8.7.11, and may
hold a ``;``): it takes whatever follows the fields' answers, and the caller compares it
whole with the identity it expects, so an answer missing or added anywhere never passes as
the same instrument.

A public module: what is rendered, and how an answer splits, is tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._classify import _Resolver
from ._errors import ScpiError
from ._profile import Profile
from ._schema import Effect

__all__ = ["IDN", "CompoundAnswerError", "ReadPlan", "joins", "read_plan"]

#: IEEE 488.2 §10.14: the identification query, asked with every snapshot.
IDN = "*IDN?"

Field = tuple[int | None, str]

#: Plans kept per profile object and field list (the same few, asked at every write).
PLANS_KEPT = 4096
_plans: dict[tuple[int, tuple[Field, ...]], tuple[Profile, ReadPlan]] = {}


class CompoundAnswerError(ValueError):
    """A compound answer that does not split into one answer per query."""


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """How a snapshot's fields are asked: ``message`` (the joined fields' queries, then
    ``*IDN?``) answers ``joined`` and the identity; each of ``alone`` is asked on its own.
    Without a ``message``, ``*IDN?`` and every field are asked one by one."""

    message: str | None
    joined: tuple[Field, ...]
    alone: tuple[Field, ...]

    def split(self, answer: str) -> tuple[list[str], str]:
        """The joined fields' answers, in order, and the identity (the rest, ``;`` and
        all). Raises :class:`CompoundAnswerError` when there are too few answers."""
        n = len(self.joined)
        parts = answer.split(";", n)
        if len(parts) != n + 1:
            raise CompoundAnswerError(
                f"{len(parts)} answers to {n + 1} queries (expected {n} values and the "
                f"identity, joined by ';')")
        return [p.strip() for p in parts[:n]], parts[n].strip()


def joins(profile: Profile, field_name: str) -> bool:
    """Whether ``field_name`` may be asked inside a compound query on ``profile``."""
    spec = profile.fields[field_name]
    return (profile.model.compound_queries and not spec.bits
            and (spec.type in ("number", "boolean") or spec.word))


def read_plan(profile: Profile, fields: list[Field] | tuple[Field, ...],
              compound: bool = True) -> ReadPlan:
    """The plan for reading ``fields`` (and ``*IDN?``) on ``profile``; kept per profile.
    ``compound`` False (a link that answers one query a message): every field alone."""
    if not compound:
        return ReadPlan(None, (), tuple(fields))
    key = (id(profile), tuple(fields))
    kept = _plans.get(key)
    if kept is not None and kept[0] is profile:
        return kept[1]
    plan = _make_plan(profile, key[1])
    if len(_plans) >= PLANS_KEPT:
        _plans.clear()
    _plans[key] = (profile, plan)
    return plan


def _make_plan(profile: Profile, fields: tuple[Field, ...]) -> ReadPlan:
    joined = tuple(f for f in fields if joins(profile, f[1]))
    if not joined:
        return ReadPlan(None, (), fields)
    queries = [profile.field_query(name, ch) for ch, name in joined]
    message = ";".join([*(":" + q.lstrip(":") for q in queries), IDN])
    if not _one_query_per_unit(profile, message, len(queries) + 1):
        return ReadPlan(None, (), fields)  # asked one by one, as before: never a guess
    return ReadPlan(message, joined, tuple(f for f in fields if f not in joined))


def _one_query_per_unit(profile: Profile, message: str, count: int) -> bool:
    """The gateway's own parser reads ``message`` as ``count`` query units, one unit per
    message unit (no channel list that answers twice), each only a read, ``*IDN?`` last."""
    try:
        units = _Resolver(message, profile, None).run().units
    except ScpiError:
        return False
    return (len(units) == count and [u.source for u in units] == list(range(count))
            and all(u.query and u.effect is Effect.READ for u in units)
            and units[-1].canonical == IDN)
