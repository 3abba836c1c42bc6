"""The confidence gate: before a plan lets an agent's write through unattended, score it.
Below the threshold the write goes to a person instead.

Silence is not confidence: a write that states none scores the configured fallback (0 by
default), so it is diverted. Nothing is ever auto-approved for lack of an approver.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

import httpx

from .config import ConfidenceConfig
from .errors import InvalidInput

__all__ = ["Score", "apply_env", "check_confidence", "score", "stated_confidence",
           "threshold_for"]

#: A stated confidence in a rationale: ``Confidence: 85%``, ``confidence 0.62``. The number is
#: taken whole (``1,000``, ``1e9``, ``-3``, ``nan``, ``inf``), then judged: never half-read.
RE_STATED = re.compile(
    r"\bconfidence\b\s*[:=]?\s*"
    r"(?P<number>[-+]?(?:[0-9][0-9.,_]*|\.[0-9][0-9.,_]*)(?:e[-+]?[0-9]+)?"
    r"|[-+]?(?:nan|infinity|inf)\b)\s*(?P<percent>%?)",
    re.IGNORECASE | re.ASCII)
ON = frozenset({"1", "true", "on", "yes"})


@dataclass(frozen=True, slots=True)
class Score:
    value: float
    estimator: str
    note: str = ""


def apply_env(config: ConfidenceConfig, env: dict[str, str] | None = None) -> ConfidenceConfig:
    """The environment's BENCH_GATE_CONFIDENCE_* settings over the file's."""
    env = dict(os.environ) if env is None else env
    data: dict[str, Any] = config.model_dump()
    prefix = "BENCH_GATE_CONFIDENCE_"
    if f"{prefix}GATE" in env:
        data["enabled"] = env[f"{prefix}GATE"].strip().lower() in ON
    if f"{prefix}GATE_THRESHOLD" in env:
        data["threshold"] = float(env[f"{prefix}GATE_THRESHOLD"])
    if f"{prefix}ESTIMATOR" in env:
        data["estimator"] = env[f"{prefix}ESTIMATOR"].strip()
    if f"{prefix}SAMPLES" in env:
        data["samples"] = int(env[f"{prefix}SAMPLES"])
    if f"{prefix}CALIBRATE" in env:
        data["calibrate"] = env[f"{prefix}CALIBRATE"].strip().lower() in ON
    if f"{prefix}ENDPOINT" in env:
        data["endpoint"] = env[f"{prefix}ENDPOINT"]
    if f"{prefix}MODEL" in env:
        data["model"] = env[f"{prefix}MODEL"]
    data["samples"] = min(9, max(1, int(data["samples"])))
    return ConfidenceConfig.model_validate(data)


def threshold_for(config: ConfidenceConfig, effect: str) -> float:
    """τ* = 1 − c_review / c_wrong where costs are configured for the effect."""
    costs = config.costs.get(effect)
    if costs is None:
        return config.threshold
    return max(0.0, min(1.0, 1.0 - costs.review / costs.wrong))


def check_confidence(value: float | None, field: str = "confidence") -> float | None:
    """A stated confidence as given, if it is a number from 0 to 1; else InvalidInput
    (NaN and the infinities included)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 <= value <= 1:
        raise InvalidInput(f"{field} must be a number from 0 to 1, not {value!r}", field=field)
    return float(value)


def stated_confidence(rationale: str | None) -> float | None:
    """The confidence a rationale states, from 0 to 1, or None if it states none.

    ``Confidence: 85%`` is 0.85 (a percentage from 0 to 100), ``confidence 0.62`` is 0.62 (a
    plain number from 0 to 1). Any statement outside those ranges, or not a plain number
    (``9500%``, ``85``, ``-0.1``, ``1,000``, ``NaN``, ``inf``), raises InvalidInput naming
    the rationale: a confidence is never guessed at or clamped. The first statement counts;
    every one must be valid."""
    found: float | None = None
    for match in RE_STATED.finditer(rationale or ""):
        raw = match.group("number").rstrip(".,")
        percent = bool(match.group("percent"))
        try:
            if any(c in raw for c in ",_") or raw.count(".") > 1:
                raise ValueError(raw)
            number = float(raw)
        except ValueError:
            number = math.nan
        top = 100.0 if percent else 1.0
        if not math.isfinite(number) or not 0 <= number <= top:
            shown = raw[:20] + ("%" if percent else "")
            raise InvalidInput(
                f"rationale states confidence {shown!r}: a confidence is a number from 0 to 1 "
                "(Confidence: 0.85) or a percentage from 0 to 100 (Confidence: 85%)",
                field="rationale")
        if found is None:
            found = number / 100 if percent else number
    return found


def verbalized(stated: float | None, rationale: str | None, fallback: float) -> Score:
    """The requester's own confidence: stated, or from the rationale. One that is not a
    valid confidence counts as silence, never as certainty (the doors refuse it first)."""
    if stated is not None:
        try:
            value = check_confidence(stated)
        except InvalidInput as exc:
            return Score(fallback, "verbalization", f"{exc.message}: ignored, counted as none")
        assert value is not None
        return Score(value, "verbalization", "stated confidence")
    try:
        value = stated_confidence(rationale)
    except InvalidInput as exc:
        return Score(fallback, "verbalization", f"{exc.message}: ignored, counted as none")
    if value is not None:
        return Score(value, "verbalization", "from the rationale")
    return Score(fallback, "verbalization", "no confidence stated: silence is not confidence")


async def self_consistency(config: ConfidenceConfig, action: str, goal: str | None,
                           trajectory: list[str], client: httpx.AsyncClient | None = None
                           ) -> Score | None:
    """Ask the configured chat endpoint ``samples`` times for a fresh YES/NO; None if it
    cannot be reached (the caller falls back and says so)."""
    if not config.endpoint:
        return None
    prompt = (
        "A lab-bench gateway is about to run an instrument write without asking a person.\n"
        f"The run's goal: {goal or '(none given)'}\n"
        "What the run already did:\n" + "\n".join(f"- {t}" for t in trajectory[-10:]) +
        f"\nThe pending action: {action}\n"
        "Should it run unattended? Answer with one word: YES or NO."
    )
    body = {"model": config.model, "messages": [{"role": "user", "content": prompt}],
            "temperature": 1.0, "max_tokens": 3}
    own = client is None
    http = client or httpx.AsyncClient(timeout=5.0)
    yes = 0
    try:
        for _ in range(config.samples):
            reply = await http.post(config.endpoint, json=body)
            reply.raise_for_status()
            text = str(reply.json()["choices"][0]["message"]["content"])
            yes += text.strip().upper().startswith("YES")
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError):
        return None
    finally:
        if own:
            await http.aclose()
    return Score(yes / config.samples, "self-consistency", f"{yes} of {config.samples} YES")


async def score(config: ConfidenceConfig, *, stated: float | None, rationale: str | None,
                action: str, goal: str | None, trajectory: list[str],
                regret: float = 0.0) -> Score:
    base: Score
    if config.estimator == "self-consistency":
        sampled = await self_consistency(config, action, goal, trajectory)
        if sampled is None:
            fallback = verbalized(stated, rationale, config.fallback)
            why = "no endpoint configured" if not config.endpoint else "endpoint unreachable"
            base = Score(fallback.value, "verbalization",
                         f"self-consistency fell back to verbalization ({why}); "
                         f"{fallback.note}")
        else:
            base = sampled
    else:
        base = verbalized(stated, rationale, config.fallback)
    if config.calibrate and regret > 0:
        return Score(base.value * (1 - regret), base.estimator,
                     f"{base.note}; calibrated by regret {regret:.2f}")
    return base
