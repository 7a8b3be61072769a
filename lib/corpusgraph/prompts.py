"""Prompt files: load, hash, and fill placeholders safely.

Prompts live as plain files under conf/prompts so users can read and edit them. `render`
replaces only the named {placeholders}, so braces inside documents or JSON examples are safe.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Prompt", "load_prompt", "render"]

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Prompt:
    template: str
    path: str

    def hash(self, *extra: Any) -> str:
        """Identity of the prompt plus anything else that shapes the answer (schema, types)."""
        payload = json.dumps([self.template, *extra], sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

    def render(self, **values: Any) -> str:
        return render(self.template, **values)


def load_prompt(path: str | Path) -> Prompt:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"prompt file not found: {p}")
    return Prompt(p.read_text(encoding="utf-8"), str(p))


def render(template: str, **values: Any) -> str:
    missing = {m for m in _PLACEHOLDER.findall(template)} - set(values)
    if missing:
        raise KeyError(f"prompt needs values for {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
