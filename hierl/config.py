"""Typed configuration base: dataclasses built from plain dicts, strict about keys and types.

Every algorithm config is a dataclass whose fields carry their documentation as an
attribute docstring (the string literal right after the field).  ``from_dict`` rejects
unknown keys with a "did you mean" suggestion, coerces JSON-ish values (lists → tuples,
ints → floats) and rejects values of the wrong type, naming the field and what is valid.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it and what is valid."""


def suggest(name: str, valid: list[str] | tuple[str, ...]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest valid name, or an empty string."""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(field: str, tp: Any, value: Any) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` or raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(field, arg, value)
            except ConfigError:
                pass
        raise ConfigError(
            f"config field '{field}' = {value!r} has the wrong type; "
            f"expected {' | '.join(_type_name(a) for a in args)}"
        )
    if origin is typing.Literal:
        if value in args:
            return value
        raise ConfigError(
            f"config field '{field}' = {value!r} is not valid; valid values: "
            + ", ".join(repr(a) for a in args)
        )
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config field '{field}' = {value!r} must be a list/tuple")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(field, args[0], v) for v in value)
        if args and len(args) != len(value):
            raise ConfigError(f"config field '{field}' = {value!r} must have {len(args)} items")
        return (
            tuple(_coerce(field, a, v) for a, v in zip(args, value, strict=False))
            if args
            else tuple(value)
        )
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config field '{field}' = {value!r} must be a dict")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config field '{field}' = {value!r} must be true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"config field '{field}' = {value!r} must be an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config field '{field}' = {value!r} must be a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field '{field}' = {value!r} must be a string")
        return value
    if inspect.isclass(tp) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return from_dict(tp, value, prefix=f"{field}.")
        raise ConfigError(f"config field '{field}' = {value!r} must be a dict")
    if callable(tp) and not inspect.isclass(tp):
        return value
    if inspect.isclass(tp) and not isinstance(value, tp):
        raise ConfigError(f"config field '{field}' = {value!r} must be a {_type_name(tp)}")
    return value


def from_dict(cls: type[C], data: Mapping[str, Any], prefix: str = "") -> C:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config must be a dict, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(
                f"unknown config key '{prefix}{key}' for {cls.__name__}"
                f"{suggest(str(key), list(fields))}; valid keys: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(prefix + key, hints[key], value)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from e


def field_docs(cls: type) -> dict[str, str]:
    """Return the attribute docstrings of a dataclass (including its bases)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


@dataclasses.dataclass
class Config:
    """Base class of typed configs: ``from_dict``, ``to_dict``, ``replace`` and checks."""

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any] | None = None) -> C:
        """Build the config from a dict; unknown keys raise a "did you mean" ConfigError."""
        return from_dict(cls, data or {})

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly dict of the fields (nested dataclasses become dicts)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value = dataclasses.asdict(value)
            out[f.name] = value
        return out

    def replace(self: C, **changes: Any) -> C:
        """Return a copy with ``changes`` applied (validated like ``from_dict``)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)

    def check(self, name: str, ok: bool, valid: str) -> None:
        """Raise ConfigError for field ``name`` unless ``ok``; ``valid`` says what is allowed."""
        if not ok:
            raise ConfigError(
                f"config field '{name}' = {getattr(self, name)!r} is invalid: {valid}"
            )
