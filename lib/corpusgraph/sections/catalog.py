"""Every configuration key, read from the sections themselves: its YAML name (aliases as written in
a file), type, default and description. One walker feeds the configuration reference (docs/) and
the settings file `corpusgraph init` writes, so neither can drift from the code. Pure: no I/O."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

__all__ = ["Entry", "REQUIRED", "INTERNAL", "entries", "section_class", "type_name", "yaml_name", "default_of"]

# Written by the loader, never by a user (Config.conf_dir).
INTERNAL = frozenset({"conf_dir"})


class _Required:
    def __repr__(self) -> str:
        return "(required)"


REQUIRED = _Required()


@dataclass(frozen=True)
class Entry:
    """One key. `key` is dotted with YAML names; keys of a model inside a list read `a.b[].c`, inside
    a mapping `a.b.<name>.c` (those are `item` entries: documented, never written as live lines)."""

    key: str
    type: str
    default: Any
    description: str
    section: bool  # a mapping of further keys, not a value
    item: bool = False

    @property
    def depth(self) -> int:
        return self.key.count(".")


def yaml_name(name: str, field: FieldInfo) -> str:
    return field.alias or name


def section_class(annotation: Any) -> type[BaseModel] | None:
    """The section class a field holds directly (not inside a list or mapping), if any."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _item_model(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """('[]', Model) for list[Model], ('.<name>', Model) for dict[str, Model]; unions searched."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            found = _item_model(arg)
            if found:
                return found
        return None
    if origin is list and args:
        inner = [a for a in (typing.get_args(args[0]) or (args[0],)) if section_class(a)]
        return ("[]", inner[0]) if inner else None
    if origin is dict and len(args) == 2 and section_class(args[1]):
        return (".<name>", args[1])
    return None


def type_name(annotation: Any) -> str:
    """A reader's spelling of a type: `int | None`, `list[str]`, `'fast' | 'llm'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    if annotation is SecretStr:
        return "secret"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def default_of(field: FieldInfo) -> Any:
    """The default as plain data (what YAML would hold), or REQUIRED."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return REQUIRED
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, SecretStr):
        return "(secret)"
    return to_jsonable_python(value, by_alias=True)


def _doc(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    return " ".join(doc.split("\n\n")[0].split()) if doc and model.__doc__ != BaseModel.__doc__ else ""


def entries(model: type[BaseModel], prefix: str = "", item: bool = False) -> Iterator[Entry]:
    """Every key under `model`, depth first in declaration order (a section before its keys)."""
    for name, field in model.model_fields.items():
        if not prefix and name in INTERNAL:
            continue
        key = prefix + yaml_name(name, field)
        sub = section_class(field.annotation)
        if sub is not None:
            yield Entry(key, sub.__name__, None, field.description or _doc(sub), True, item)
            yield from entries(sub, key + ".", item)
            continue
        yield Entry(key, type_name(field.annotation), default_of(field), field.description or "", False, item)
        nested = _item_model(field.annotation)
        if nested:
            marker, inner = nested
            yield from entries(inner, key + marker + ".", True)
