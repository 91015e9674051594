"""Is the distribution's name ours to upload on the package index? One line, for ``make release-check``.

Why: ``autotune`` on the index is another project (issue 61), and an upload of a version the index
already has is refused. Asked through pip, as this machine's pip is configured: first for pip itself
(an index that cannot answer that cannot be reached, and then the check is said to be skipped, exit 0,
so the rest of the release check still runs offline), then for the name. Exit 1 only when this very
version is already there; a name the index knows with other versions is reported (it should be ours).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip", "index", "versions", "--retries", "0", "--timeout", "15"]


def index_versions(name: str) -> tuple[bool, list[str]]:
    """(the index answered, the versions it holds of ``name``); pip says "No matching distribution" for none."""
    proc = subprocess.run([*PIP, name], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode == 0:
        found = re.search(r"Available versions:\s*(.+)", proc.stdout)
        return True, [v.strip() for v in found.group(1).split(",")] if found else []
    return "No matching distribution" in proc.stderr, []


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    _, pips = index_versions("pip")  # pip is on any reachable index: no versions of it, no index
    if not pips:
        print(f"release-check: the package index cannot be reached; the check that {name} is free there is skipped")
        return 0
    answered, versions = index_versions(name)
    if not answered:
        print(f"release-check: the package index did not answer for {name}; the name check is skipped")
        return 0
    if version in versions:
        print(f"release-check: {name} {version} is already on the package index: raise the version before a release")
        return 1
    if versions:
        print(f"release-check: {name} is on the package index with {', '.join(versions)} (this release: {version})")
    else:
        print(f"release-check: the name {name} is free on the package index (this release: {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
