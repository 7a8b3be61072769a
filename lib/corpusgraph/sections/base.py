"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    # A misspelt key must fail loudly rather than leave a default silently in place.
    model_config = ConfigDict(extra="forbid")
