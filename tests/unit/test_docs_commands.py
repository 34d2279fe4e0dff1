"""Every command in the README and docs runs as written.

Each shell block in the Markdown says what it needs, in an HTML comment on the line
before its fence (invisible once rendered):

- `<!-- commands: offline -->`: needs no AWS account, no cluster and little time;
  this test runs it, from a scratch folder that sees the repository's files;
- `<!-- commands: long -->`: runs here too, but takes minutes (`make test`, the
  demo, benchmarks); not run, its `make` targets and `muster` commands are checked;
- `<!-- commands: aws -->`: needs an AWS account (deploy, the stack's outputs);
- `<!-- commands: cluster -->`: needs a Kubernetes cluster (`kubectl`);
- `<!-- commands: data -->`: needs a job trace Muster does not ship.

The `make` targets and `muster` subcommands of every block are checked to exist.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"offline", "long", "aws", "cluster", "data"}
SHELL = {"bash", "sh", "shell", "console"}
MARK = re.compile(r"^<!--\s*commands:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(`{3,})\s*(\S*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    kind: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks(path: Path) -> list[Block]:
    """The shell blocks of a Markdown file, each with the kind its comment names."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    n = 0
    while n < len(lines):
        m = FENCE.match(lines[n])
        if not m:
            n += 1
            continue
        fence, info = m.group(1), m.group(2).lower()
        end = n + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if info in SHELL:
            before = next((x for x in reversed(lines[:n]) if x.strip()), "")
            mark = MARK.match(before.strip())
            blocks.append(
                Block(path, n + 1, mark.group(1) if mark else None, "\n".join(lines[n + 1 : end]))
            )
        n = end + 1
    return blocks


ALL = [b for p in doc_files() for b in shell_blocks(p)]


def commands(text: str) -> list[list[str]]:
    """The simple commands of a block: lines joined at backslashes, split at `|`,
    `&&`, `;` and `&`, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found: list[list[str]] = []
    for line in joined.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue  # a here-document's body or a quoted JSON fragment
        current: list[str] = []
        for w in [*words, ";"]:
            if w in {"|", "&&", "||", ";", "&"}:
                if current:
                    found.append(current)
                current = []
            else:
                current.append(w)
    return found


def muster_commands() -> dict[str, set[str]]:
    """`muster`'s subcommands, each with its own subcommands (if any)."""
    from muster.cli import build_parser

    def choices(parser: object) -> dict[str, object]:
        for action in getattr(parser, "_actions", []):
            if getattr(action, "choices", None) and hasattr(action, "_name_parser_map"):
                return dict(action.choices)
        return {}

    return {name: set(choices(sub)) for name, sub in choices(build_parser()).items()}


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, flags=re.M))


def test_the_block_reader_finds_kinds_and_commands(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n\n<!-- commands: offline -->\n```bash\nmake simulate  # a comment\n"
        "muster settings validate s.yaml | head -3\n```\n\n```bash\nls\n```\n"
        "```yaml\na: 1\n```\n"
    )
    first, second = shell_blocks(doc)
    assert (first.kind, first.line, second.kind) == ("offline", 4, None)
    assert commands(first.text) == [
        ["make", "simulate"],
        ["muster", "settings", "validate", "s.yaml"],
        ["head", "-3"],
    ]


@pytest.mark.parametrize("block", ALL, ids=str)
def test_every_shell_block_says_what_it_needs(block: Block) -> None:
    assert block.kind in KINDS, (
        f"{block}: put `<!-- commands: KIND -->` (one of {sorted(KINDS)}) on the line "
        "before the fence"
    )


@pytest.mark.parametrize("block", ALL, ids=str)
def test_the_make_targets_and_muster_commands_exist(block: Block) -> None:
    targets, known = make_targets(), muster_commands()
    for words in commands(block.text):
        program = Path(words[0]).name
        if program == "make":
            for target in (w for w in words[1:] if not w.startswith("-") and "=" not in w):
                assert target in targets, f"{block}: no make target {target!r}"
        elif program == "muster" and len(words) > 1 and not words[1].startswith("-"):
            assert words[1] in known, f"{block}: no muster command {words[1]!r}"
            subs = known[words[1]]
            if subs and len(words) > 2 and not words[2].startswith("-"):
                assert words[2] in subs, f"{block}: no muster {words[1]} {words[2]!r}"


OFFLINE = [b for b in ALL if b.kind == "offline"]


def test_the_docs_have_commands_to_run() -> None:
    assert len(OFFLINE) >= 3, [str(b) for b in OFFLINE]


def scratch_checkout(tmp_path: Path) -> Path:
    """A folder that sees the repository's files (links) but writes its own `out/`."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {"out", ".git"}:
            (work / entry.name).symlink_to(entry)
    return work


@pytest.mark.parametrize("block", OFFLINE, ids=str)
def test_offline_commands_run_as_written(block: Block, tmp_path: Path) -> None:
    work = scratch_checkout(tmp_path)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MUSTER_DEBUG", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{block} failed:\n{block.text}\n{done.stdout}\n{done.stderr}"
