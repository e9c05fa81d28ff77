"""Pydantic events for test_pydantic (imported by the test and by its producer processes)."""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Final, List, Optional

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

import snapbus


class Step(BaseModel):
    """A monty-like event: declared fields, then extras; id from `kind`, version `VERSION`."""

    model_config = ConfigDict(extra="allow")
    VERSION: Final[int] = 3
    kind: str = "Step"
    episode: int = 0


class Fixed(BaseModel):
    """An id and version of its own (ClassVars win over `kind` and `VERSION`)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
    schema_id: ClassVar[str] = "lab.fixed"
    schema_version: ClassVar[int] = 2
    VERSION: ClassVar[int] = 9
    kind: str = "ignored"
    ratio: snapbus.f32 = 0.5
    stats: Dict[str, Any] = {}
    tags: List[str] = []
    maybe: Optional[int] = None
    image: Optional[NDArray[np.uint8]] = None


class Plain(BaseModel):
    """No `schema_id`, no `kind`, no version: the class name, version 1."""

    x: int = 1


class Inner(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int = 1
