"""Tenant text made safe to print: control characters shown, never obeyed.

A container's termination message, a pod's reason, an API server's error quoting
an object: each may carry text a tenant wrote. Printed raw, an escape sequence
clears the administrator's screen or writes their clipboard (OSC 52), and a
newline inside a field starts a line that reads as Muster's own ("Reactivated
reason=ApprovedByAdmin"). `printable` writes every such character as an escape
(`\\x1b`, `\\n`, `\\u202e`), so the text reads as it was written, on one line.
"""

from __future__ import annotations

import re

# C0 controls (newline, tab and ESC among them), DEL, C1 controls (CSI 0x9b, OSC
# 0x9d, ...), and the Unicode line separators and bidirectional overrides that
# make a line end or read in another order than it is stored.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character written as an escape (unchanged if it has none)."""
    return _UNSAFE.sub(_escaped, text)


def printable_or_none(text: str | None) -> str | None:
    return None if text is None else printable(text)
