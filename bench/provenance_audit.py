#!/usr/bin/env python
"""Which results say who made them (issue 53): the command, the revision and the jax of every results/**/*.md.

    python bench/provenance_audit.py

Each Markdown (and the JSON beside it: same stem, else the only JSON of its folder) is read for (a) a command
(``Made by `...` `` or "Regenerate: `...`" naming ``python``/``autotune``/``make``, a line or fenced block
running ``python bench/...``; the JSON's ``command``), (b) a revision (``at REV``, ``committed in REV``; the
JSON's ``provenance.revision``) and (c) a jax/jaxlib/XLA version (``jax 0.10.2``, ``xla:jaxlib-0.10.2-...``;
the JSON's ``provenance.jax``, ``jax``, ``pipeline_version``, ``xla_version``, ``version``). Writes
``results/provenance.md`` (a table, what is missing, a summary) and ``results/provenance.json``.

Files made before the harness stamped them carry a backfilled line under their title, "Made by `COMMAND`
(committed in REV; jax 0.10.2).": REV is the commit that last changed the file before the backfill (the run
may predate it); the jax is the one the file or its JSON records, else 0.10.2 where REV is an ancestor of
4ec50f9 (jax/jaxlib were pinned to 0.10.2 exactly until then). What could not be established is left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import RESULTS, Provenance, rel, write

OUT_STEM = "provenance"
#: Results Markdown that does not name both a command and a jax version, and why (tests/test_bench_harness.py
#: holds every other results Markdown to both; a new results file belongs on the harness, not here).
#: Empty: the last five (scripts moved to bench/experiments/ in d604010) were backfilled from the change before
#: the move, an ancestor of 4ec50f9, when jax was pinned at 0.10.2.
INCOMPLETE: frozenset[str] = frozenset()

COMMAND = re.compile(r"(?:Made by|Regenerat\w*:?)[^`\n]{0,3}`((?:python|autotune|make) [^`]+)`"
                     r"|^`(python bench/[^`]+)`", re.M)
FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.S)
FENCED_COMMAND = re.compile(r"^\s*(python bench/\S.*)$", re.M)  # a "Reproduce" block of autotune calls is not one
REVISION = re.compile(r"\b(?:committed in|revision|commit)\s+`?([0-9a-f]{7,40})\b(?!-)|\bat\s+`?((?=[0-9a-f]*[a-f])"
                      r"[0-9a-f]{7,40}|\d{7,40}(?=(?:\+dirty)? with jax))\b(?!-)")  # "at 1234567" alone: a number
JAX = re.compile(r"\bjax(?:lib)?(?:[ =-]|==)v?(\d+\.\d+(?:\.\d+)*)")


@dataclass
class Row:
    file: str
    json: str
    command: str
    revision: str
    jax: str

    @property
    def missing(self) -> list[str]:
        return [name for name in ("command", "revision", "jax") if not getattr(self, name)]


def json_beside(md: Path) -> Path | None:
    same = md.with_suffix(".json")
    if same.is_file():
        return same
    others = sorted(md.parent.glob("*.json"))
    return others[0] if md.parent != RESULTS and len(others) == 1 else None


def read_json(path: Path | None) -> dict:
    try:
        data = json.loads(path.read_text()) if path else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def command_in(text: str) -> str:
    found = COMMAND.search(text)
    if found:
        return (found.group(1) or found.group(2)).strip()
    for block in FENCED.findall(text):
        line = FENCED_COMMAND.search(block)
        if line:
            return line.group(1).strip()
    return ""


def revision_in(text: str) -> str:
    return next((plain or at for plain, at in REVISION.findall(text)), "")


def jax_in(text: str) -> str:
    return next(iter(JAX.findall(text)), "")


def json_fields(data: dict) -> tuple[str, str, str]:
    """(command, revision, jax) as the JSON records them ("" where it does not)."""
    prov = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    command = str(prov.get("command") or data.get("command") or "")
    revision = str(prov.get("revision") or "").split("+")[0]
    jax = str(prov.get("jax") or data.get("jax") or "")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)*", jax):
        jax = next((jax_in(str(data[k])) for k in ("pipeline_version", "xla_version", "version", "pipeline")
                    if k in data and jax_in(str(data[k]))), "")
    return command if command.startswith(("python ", "autotune ")) else "", revision, jax


def audit(md: Path) -> Row:
    text = md.read_text()
    beside = json_beside(md)
    j_command, j_revision, j_jax = json_fields(read_json(beside))
    return Row(rel(md), rel(beside) if beside else "", command_in(text) or j_command,
               revision_in(text) or j_revision, jax_in(text) or j_jax)


def results_markdown(root: Path = RESULTS) -> list[Path]:
    return sorted(p for p in root.rglob("*.md") if p != root / f"{OUT_STEM}.md")


def render(rows: list[Row]) -> str:
    n = len(rows)
    count = {name: sum(bool(getattr(r, name)) for r in rows) for name in ("command", "revision", "jax")}
    complete = sum(not r.missing for r in rows)
    lines = ["# Provenance of the results files (issue 53)", "",
             f"{n} results Markdown files: **{count['command']}** name a command, **{count['revision']}** a "
             f"revision, **{count['jax']}** a jax/jaxlib/XLA version; **{complete}** all three. Read from each "
             "Markdown and the JSON beside it (see `bench/provenance_audit.py`). \"committed in REV\" is the "
             "commit that last changed a file before its provenance line was backfilled: the run may predate it.",
             "", "| file | command | revision | jax | missing |", "|---|---|---|---|---|"]
    cell = lambda s: f"`{s}`" if s and len(s) <= 60 else (f"`{s[:57]}...`" if s else "-")  # noqa: E731
    for r in rows:
        command = cell(r.command).replace("|", "\\|")
        lines.append(f"| {r.file} | {command} | {r.revision or '-'} | {r.jax or '-'} | {', '.join(r.missing)} |")
    allowed = sorted(INCOMPLETE)
    lines += ["", f"Allowed to lack a command or a jax version ({len(allowed)}, `INCOMPLETE` in "
              "`bench/provenance_audit.py`, which says why; tests/test_bench_harness.py holds every other results "
              "Markdown to both): " + (", ".join(allowed) if allowed else "none") + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = [audit(md) for md in results_markdown()]
    data = {"files": [asdict(r) | {"missing": r.missing} for r in rows], "incomplete_allowed": sorted(INCOMPLETE)}
    path = write(RESULTS, OUT_STEM, data, render(rows), Provenance.now(target="none (nothing compiled)"))
    print(render(rows).split("\n")[2], f"\nwrote {rel(path)}")


if __name__ == "__main__":
    main()
