"""The machine a tuned module will run on: part of every cache key, run, record and policy.

A pass ordering is judged by a compiler pipeline, and the pipeline depends on the target: XLA's CPU
pipeline and its GPU pipeline configure the same passes differently and fuse, lay out and launch
the result differently. An ordering judged for one target says nothing about another (measured: a
CPU-chosen ordering made a Gemma step 15% slower on an H200), so the target travels with every
result, and a result judged for one target is refused for another.

The core knows a target only as this value; the backend resolves a user's ``--target`` to one
(``Backend.target``) and owns what it means (for XLA, ``pipelines/xla/targets.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from autotune.errors import BadInput


@dataclass(frozen=True)
class Target:
    """``name`` as the user says it (``cpu``, ``h100``, a config file's stem); ``platform`` ``cpu`` or
    ``gpu``; ``description`` for people (the device name); ``digest`` a short hash of the target's
    specification (empty for the host CPU), so two configs under one name never share results;
    ``compiler`` whose pipeline judges for it, in the words every report uses for the baseline
    ("XLA's default"; the toy backend's "toy's default")."""

    name: str
    platform: str
    description: str = ""
    digest: str = ""
    compiler: str = "XLA"

    @property
    def key(self) -> str:
        """What records, runs and policies store: the name, plus the digest for a specified device."""
        return self.name if not self.digest else f"{self.name}-{self.digest}"

    @property
    def is_gpu(self) -> bool:
        return self.platform == "gpu"

    def judged_by(self) -> str:
        """Which pipeline judges results for this target, in words (every run says it)."""
        if self.is_gpu:
            return f"{self.compiler}'s GPU pipeline for {self.description or self.name}, compiled without a GPU"
        return f"{self.compiler}'s CPU pipeline"

    @property
    def baseline(self) -> str:
        """The ordering every result is measured against, in words: "XLA's default"."""
        return f"{self.compiler}'s default"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Target":
        if not data:
            return CPU
        return cls(str(data.get("name", "cpu")), str(data.get("platform", "cpu")), str(data.get("description", "")),
                   str(data.get("digest", "")), str(data.get("compiler") or "XLA"))


#: The host CPU: the default target, and what every result made before targets existed was judged for.
CPU = Target("cpu", "cpu", "the host CPU")


def check_same(recorded: str | None, current: Target, what: str) -> None:
    """Refuse to use ``what`` (a record, a policy, a run) judged for target key ``recorded`` on
    ``current``: one clear line (``BadInput``). ``None`` (written before targets existed) means cpu."""
    recorded = recorded or CPU.key
    if recorded != current.key:
        raise BadInput(f"{what} was judged for target '{recorded}', not for '{current.key}': "
                       f"tune again with --target {current.name} (an ordering judged for one target says "
                       f"nothing about another)")
