"""Sample events for handler tests, read from tests/events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).parent / "events"


def sample(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())
