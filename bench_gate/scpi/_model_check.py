"""A profile file's parts checked against each other before it is used: each form's fields,
parameters, memory and excitation, the addressing, and the safe action. A profile whose
parts disagree is refused at load (``Profile.from_model``), never half used.

To teach the loader a new section that must agree with the rest of the file, add its check
to :func:`check_model`.
"""

from __future__ import annotations

from ._errors import ScpiError
from ._lexer import lex
from ._patterns import check_forbidden_under, keyword_short, pattern_canonical
from ._schema import CommandSpec, Effect, FormSpec, ProfileError, ProfileModel, SafeActionSpec

__all__ = ["check_model"]


def check_model(model: ProfileModel) -> None:
    """Refuse a profile whose parts disagree: each form's fields, parameters and excitation,
    and the safe action. A new section of the file adds its own check here."""
    for command in model.commands:
        for form in (command.set, command.query):
            if form is not None:
                _check_form(model, command, form)
    _check_addressing(model)
    check_forbidden_under(model)  # scpi/_patterns.py
    safe = model.safe_action
    if isinstance(safe, SafeActionSpec) and (safe.field not in model.fields
                                             or model.fields[safe.field].type != "boolean"):
        raise ProfileError(f"{model.name}: safe_action.field {safe.field!r} must name a "
                           "boolean field")
    if safe is not None and not isinstance(safe, SafeActionSpec) and (
            model.excitation is None or model.channels or "{ch}" in safe.command):
        # Its read-back is the excitation query: nothing else shows a meter passive.
        raise ProfileError(f"{model.name}: a safe_action without a field is a meter's: it "
                           "needs an excitation section to show it passive, and no channels")
    for number, channel in model.channels.items():
        if not channel.defaults.keys() <= model.fields.keys():
            raise ProfileError(f"{model.name}: channel {number}: defaults name unknown fields")
    for name, spec in model.fields.items():
        if spec.word and (spec.type != "text" or spec.bits):
            raise ProfileError(f"{model.name}: field {name!r}: word is for a text field "
                               "read by a query of its own")
        if spec.guards is not None and spec.type != "boolean":
            raise ProfileError(f"{model.name}: field {name!r}: guards is for a boolean field")
        held = {f for fields in spec.off_holds.values() for f in fields}
        if spec.off_holds and (spec.type != "text" or safe is None
                               or not held <= model.fields.keys()):
            raise ProfileError(f"{model.name}: field {name!r}: off_holds is for a text field "
                               "of a profile with a safe action, and names its fields")


def _check_addressing(model: ProfileModel) -> None:
    spec = model.addressing
    if spec is None:
        return
    if model.compound_queries:  # each query needs its select command sent before it
        raise ProfileError(f"{model.name}: compound_queries cannot go with addressing")
    if spec.select is None:
        if list(model.channels) != [spec.default]:
            raise ProfileError(f"{model.name}: addressing without a select command is for "
                               "one channel, the default")
        return
    if spec.default not in model.channels or "{ch}" not in spec.select:
        raise ProfileError(f"{model.name}: addressing needs a select command with {{ch}} "
                           "and a default that is one of the channels")
    for ch in model.channels:
        try:
            one = len(lex(spec.select.format(ch=ch))) == 1
        except ScpiError:
            one = False
        if not one:
            raise ProfileError(f"{model.name}: addressing.select must be one SCPI unit")


def _check_form(model: ProfileModel, command: CommandSpec, form: FormSpec) -> None:
    if any(p.repeat for p in form.params[:-1]) or (form.params and form.params[-1].repeat and (
            form.expand or form.params[-1].type in ("string", "block"))):
        raise ProfileError(f"{command.header}: only the last parameter, not a string or block, "
                           "of a form that does not expand may repeat")
    for p in form.params:
        if p.type == "number" and p.field is None and p.range is None:
            raise ProfileError(f"{command.header}: number {p.name!r} needs a field")
        if p.field is not None and p.field not in model.fields:
            raise ProfileError(f"{command.header}: unknown field {p.field!r}")
    if form.field is not None and form.field not in model.fields:
        raise ProfileError(f"{command.header}: unknown field {form.field!r}")
    if form.separators_in_data and not any(p.type in ("string", "block") for p in form.params):
        raise ProfileError(f"{command.header}: separators_in_data needs a string "
                           "or block parameter")
    if form.local and (form is command.query or form.effect is not Effect.HARMLESS
                       or form.expand):
        raise ProfileError(f"{command.header}: only a harmless command form, not "
                           "a query or an expansion, can be local")
    _check_memory(model, command, form)
    _check_excitation(command, form)


def _check_memory(model: ProfileModel, command: CommandSpec, form: FormSpec) -> None:
    """A form that changes a stored state goes to the executor, which records what it
    stores (never the harmless path, which sends at once); a recall names what it brings
    back."""
    if form.memory is None:
        return
    if form is command.query or form.effect is not Effect.STATE or form.expand:
        raise ProfileError(f"{command.header}: memory is for a command form with effect "
                           "state that does not expand")
    if form.restores and (form.memory != "recall" or not set(form.restores) <= set(
            model.fields)):
        raise ProfileError(f"{command.header}: restores names fields a memory recall "
                           "brings back")
    if form.memory != "forget" and (not form.params or form.params[0].type not in (
            "integer", "string")):
        raise ProfileError(f"{command.header}: a memory {form.memory} names its slot or "
                           "file in its first parameter (integer or string)")


def _check_excitation(command: CommandSpec, form: FormSpec) -> None:
    """An exciting form says what it applies; a parameter's exciting values are its own."""
    if form.effect is Effect.EXCITES and not form.applies:
        raise ProfileError(f"{command.header}: an excites form says what it applies "
                           "(applies: ...)")
    for p in form.params:
        if p.keywords and p.type not in ("number", "integer"):
            raise ProfileError(f"{command.header}: keywords are for number and integer "
                               f"parameters, not {p.type} {p.name!r}")
        if not p.excites:
            continue
        if p.type not in ("choice", "string") or not p.choices:
            raise ProfileError(f"{command.header}: excites values need a choice or string "
                               f"parameter with choices ({p.name!r})")
        if form.expand:
            raise ProfileError(f"{command.header}: an expansion cannot excite by value")
        shorts = {pattern_canonical(c) if p.type == "string"
                  else keyword_short(c) for c in p.choices}
        unknown = sorted(set(p.excites) - shorts)
        if unknown:
            raise ProfileError(f"{command.header}: excites names {', '.join(unknown)}, not "
                               f"among the choices of {p.name!r} ({', '.join(sorted(shorts))})")
