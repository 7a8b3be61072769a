"""Name cleaning shared by the index side (extraction) and the query side (matching).

Both sides must agree on what a name is: an entity extracted as "the Iron Coast Company's"
is found by a question that says "Iron Coast Company" only if both clean and normalise alike.
"""

from __future__ import annotations

import re

__all__ = ["clean_name", "normalise_name"]

_MAX_NAME_CHARS = 80  # the extraction schema's maxLength for a name
_DETERMINERS = frozenset("the a an this that these those his her its their our my your".split())
_LEADING = re.compile(r"^(?:" + "|".join(sorted(_DETERMINERS)) + r")\s+", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(?:'s|\u2019s|'|\u2019)$")
_EDGE_PUNCT = " \t\n\"'`.,;:!?()[]{}<>\u201c\u201d\u2018\u2019-"
_NON_WORD = re.compile(r"[^\w]+")


def clean_name(text: str) -> str:
    """A mention as a name: one line, no leading article or possessive, no edge punctuation.

    "the American Institute of Physics" and "American Institute of Physics" must resolve to one
    entity, and exact-name resolution cannot know that articles do not count. "" when nothing
    name-like is left (digits or punctuation only, one character).
    """
    name = " ".join(str(text or "").split()).strip(_EDGE_PUNCT)
    previous = None
    while previous != name:
        previous = name
        name = _LEADING.sub("", name)
        name = _POSSESSIVE.sub("", name).strip(_EDGE_PUNCT)
    if len(name) < 2 or name.casefold() in _DETERMINERS or not any(ch.isalpha() for ch in name):
        return ""
    return name[:_MAX_NAME_CHARS]


def normalise_name(text: str) -> str:
    """Casefolded words joined by single spaces: 'Dr. Mara  Voss' -> 'dr mara voss'."""
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


_NOT_ALNUM = re.compile(r"[\W_]+")


def squashed(text: str) -> str:
    """Casefolded letters and digits alone, spaces and punctuation (underscores too) dropped:
    "ChaeSong-hwa" and "Chae Song-hwa" read the same."""
    return _NOT_ALNUM.sub("", (text or "").casefold())
