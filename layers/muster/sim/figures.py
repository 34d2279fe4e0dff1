"""How the simulator's and the tuner's figures of time read: one unit for one size.

`muster simulate`'s table, `muster tune`'s table, baseline line and picture all
write seconds through `format_seconds` (a spread over seeds through
`format_spread`), so the same figure reads the same everywhere: seconds below two
minutes, minutes below two hours, hours below two days, then days.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# (the smallest figure written in the unit, its suffix, seconds in it), largest first.
_UNITS: tuple[tuple[float, str, float], ...] = (
    (2 * 86400.0, "d", 86400.0),
    (2 * 3600.0, "h", 3600.0),
    (120.0, "m", 60.0),
    (0.0, "s", 1.0),
)


def _unit(seconds: float) -> tuple[str, float]:
    for smallest, suffix, size in _UNITS:
        if abs(seconds) >= smallest:
            return suffix, size
    return "s", 1.0


def _number(value: float, suffix: str) -> str:
    """Seconds to a tenth, without a trailing `.0` (`45s`, `61.3s`); other units to a tenth."""
    if suffix == "s":
        return f"{round(value, 1):g}"
    return f"{value:.1f}"


def format_seconds(value: float) -> str:
    """Seconds in the unit a reader takes in at a glance: `45s`, `41.3m`, `6.7h`, `2.3d`
    (`-` for never: a figure that is not finite)."""
    if not math.isfinite(value):
        return "-"
    suffix, size = _unit(value)
    return f"{_number(value / size, suffix)}{suffix}"


def format_spread(values: Sequence[float]) -> str:
    """Seconds over several seeds as `mean±half-range` in the mean's unit, e.g. `7.9±0.1h`."""
    if not values or not all(math.isfinite(v) for v in values):
        return "-"
    mean = math.fsum(values) / len(values)
    half = (max(values) - min(values)) / 2
    suffix, size = _unit(mean)
    return f"{_number(mean / size, suffix)}±{_number(half / size, suffix)}{suffix}"
