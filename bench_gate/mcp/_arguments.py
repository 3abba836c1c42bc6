"""A tool call's arguments checked against the schema the tool publishes (``tools/list``),
before the SDK reads them.

The SDK validates arguments in pydantic's lax mode: ``"yes"`` and ``1`` become the boolean
true, ``true`` the count 1, ``"3"`` the number 3, ``"[1]"`` the list [1], and an argument the
tool does not take is dropped. An agent that sent any of these meant something else; a plan
asking to switch an output on, or a write run without what it said, is not what it asked
for. So a JSON type other than the schema's, or a key the tool (or one of its objects) does
not take, is ``invalid_input``, naming the argument and the rule, never the value sent.
Every other rule (lengths, ranges) stays the SDK's, with its own messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.validators import extend

from ..texts import redact
from ._backend import ToolFailure

__all__ = ["ToolArguments"]

#: Only the shape is judged here: each JSON type and each key.
_RULES_LEFT_TO_THE_SDK = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                          "minLength", "maxLength", "minItems", "maxItems", "pattern",
                          "required", "enum", "const", "multipleOf", "format")


def _skip(*args: Any) -> Iterator[ValidationError]:
    return iter(())


_Shape = extend(Draft202012Validator, validators=dict.fromkeys(_RULES_LEFT_TO_THE_SDK, _skip))
_WORDS = {"boolean": "a valid boolean", "integer": "a valid integer", "number": "a valid number",
          "string": "a valid string", "array": "a valid list", "object": "an object",
          "null": "null"}


def _types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [t for branch in schema.get("anyOf", ()) for t in _types(branch)]


def _rule(error: ValidationError) -> list[str]:
    where = ".".join(redact(str(p)[:60]) or "(withheld)" for p in error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set((error.schema or {}).get("properties", {}))
        return [f"{'.'.join(filter(None, [where, redact(str(k)[:60]) or '(withheld)']))}: "
                "Extra inputs are not permitted" for k in error.instance if k not in known]
    expected = _types({"type": error.validator_value}) if error.validator == "type" \
        else _types(error.schema)
    words = " or ".join(dict.fromkeys(_WORDS.get(t, t) for t in expected)) or "another type"
    return [f"{where or 'arguments'}: Input should be {words}"]


class ToolArguments:
    """The published input schema of each tool, and the check of a call against it."""

    def __init__(self, tools: dict[str, dict[str, Any]]) -> None:
        self._checks = {name: _Shape(schema) for name, schema in tools.items()}
        self._takes = {name: frozenset(schema.get("properties") or ())
                       for name, schema in tools.items()}

    def refusal(self, tool: str, arguments: dict[str, Any]) -> ToolFailure | None:
        """Why ``arguments`` cannot be ``tool``'s, or None (an unknown tool is the SDK's)."""
        if tool not in self._checks:
            return None
        takes = self._takes[tool]
        unknown = sorted(str(a) for a in arguments if a not in takes)
        if unknown:
            named = ", ".join(repr(redact(a[:60]) or "(withheld)") for a in unknown)
            return ToolFailure("invalid_input", f"{tool} takes no argument {named}; it takes "
                               f"{', '.join(sorted(takes)) or 'none'}",
                               hint=f"the schema of {tool}")
        rules = [r for e in self._checks[tool].iter_errors(arguments) for r in _rule(e)]
        if rules:
            return ToolFailure("invalid_input", f"{tool}: {'; '.join(sorted(set(rules)))}",
                               hint=f"the schema of {tool}")
        return None
