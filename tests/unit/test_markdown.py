"""The repository's Markdown renders as intended: every code fence is closed, and
nothing follows a closing fence (text there opens a new block instead, and turns
the headings after it into code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", "node_modules", "cdk.out", "out", ".git", ".pytest_cache", ".mypy_cache"}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def markdown_files() -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*.md")
        if not SKIP & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)
    )


def fence_problems(text: str) -> list[str]:
    """Where the fences of a Markdown text go wrong, as `line N: what` strings."""
    problems: list[str] = []
    opened: tuple[int, str] | None = None  # (line, fence)
    for n, line in enumerate(text.splitlines(), start=1):
        m = FENCE.match(line)
        if not m:
            continue
        fence, rest = m.group(1), m.group(2)
        if opened is None:
            opened = (n, fence)
            continue
        same = fence[0] == opened[1][0] and len(fence) >= len(opened[1])
        if same and not rest.strip():
            opened = None
        elif same:
            problems.append(
                f"line {n}: text after a fence inside the block opened on line {opened[0]} "
                f"(a closing fence takes nothing after it): {line.strip()[:60]!r}"
            )
    if opened is not None:
        problems.append(f"line {opened[0]}: code block never closed")
    return problems


def test_the_check_finds_text_after_a_closing_fence_and_an_unclosed_block() -> None:
    broken = "```bash\nmake\n``` then more text\n## Heading\n```\n"
    assert fence_problems(broken) == [
        "line 3: text after a fence inside the block opened on line 1 (a closing fence "
        "takes nothing after it): '``` then more text'"
    ]
    assert fence_problems("```\ncode\n") == ["line 1: code block never closed"]
    assert fence_problems("````md\n```\ninner\n```\n````\n") == []


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_fences_are_balanced(path: Path) -> None:
    assert fence_problems(path.read_text()) == []
