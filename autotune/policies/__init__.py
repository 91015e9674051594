"""Policies shipped with autotune: ``NAME.zip`` (stable-baselines3) plus its sidecar ``NAME.zip.json``
and its torch-free weights ``NAME.zip.npz`` (``autotune.rl.forward``: roll-outs need no torch).

The sidecar (``autotune.rl.train.sidecar_path``) records what the policy's inputs and outputs mean:
the pipeline version it was trained on, the name of every observation feature, the action
vocabulary and the training set. ``--policy NAME`` (and ``policy=NAME`` in the API) finds a shipped
policy by name; a path to a ``.zip`` still works. ``autotune run --strategy ppo MODEL`` with no
``--policy`` starts from the shipped ``DEFAULT`` policy (``llm``) when the package holds one.
A policy is shipped by copying its three files here (``autotune train --help`` says how it is retrained).
Directories listed in ``$AUTOTUNE_POLICY_PATH`` (``os.pathsep``-separated) are searched first, so a
team can keep its own policies by name (and the tests use a policy trained in a temporary directory).

A **committee** is a directory of policies (``NAME/*.zip``, each with its sidecar), found by the
directory's name or path: ``--policy llm-committee`` rolls out each member in turn (``-O
ensemble=each``, ``strategies/ppo.py``) and the run keeps the best answer. Why a directory: the
same recipe trained with another PPO seed can be tens of points worse on real steps at one roll-out
(docs/policies.md), and a committee of three seeds is not (each of three disjoint draws of the
quick recipe's nine seeds recovered 124-126% of a search's gain on the shared LLM steps), so the
members ship together, in name order, and are used together.

A policy **retrained on another jaxlib** ships beside the original as ``NAME.jax-MAJOR.MINOR.zip``
(``llm.jax-0.12.zip``) and answers to the plain name: ``find("llm")`` returns the variant whose
sidecar says it was trained on the installed jaxlib's minor release, else the one trained nearest it.
Why: a policy is matched to another XLA's passes by name (``autotune.rl.vocabulary``), but it cannot
choose a pass it never saw, and on jax 0.12 the 0.10.2-trained ``llm`` recovered 75% of a search's gain
on the real LLM steps where it recovered 95% on its own jaxlib (results/policy-versions/).
``--policy llm.jax-0.12`` names one variant explicitly.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from autotune.errors import BadInput
from autotune.pipelines.xla import versions
from autotune.rl.vocabulary import trained_xla

#: The policy ``autotune run --strategy ppo`` starts from when it is shipped.
DEFAULT = "llm"
#: The default for a partitioned step (a module with collectives) when it is shipped: ``llm`` never saw
#: one and recovers 65% of a search's gain on the partitioned test modules where this one gets 99%.
PARTITIONED = "llm-spmd"
#: ``NAME.jax-0.12``: the policy ``NAME`` retrained on that jaxlib (module docstring).
VARIANT = re.compile(r"^(?P<base>.+)\.jax-(?P<version>\d+(?:\.\d+)*)$")


def directory() -> Path:
    """Where shipped policies live (this package's directory)."""
    return Path(__file__).resolve().parent


def search_path() -> list[Path]:
    """The directories searched for a policy by name: ``$AUTOTUNE_POLICY_PATH``'s, then the package's."""
    extra = [Path(d) for d in os.environ.get("AUTOTUNE_POLICY_PATH", "").split(os.pathsep) if d]
    return [*extra, directory()]


def _members(folder: Path) -> list[Path]:
    """The policies in ``folder`` (a ``.zip`` with its sidecar next to it), in name order."""
    return [p for p in sorted(folder.glob("*.zip")) if Path(f"{p}.json").is_file()]


def _policies(folder: Path) -> dict[str, Path]:
    """``{name: file}`` of the policies in ``folder`` and ``{name: directory}`` of its committees
    (sub-directories holding at least two policies)."""
    if not folder.is_dir():
        return {}
    found = {p.name[: -len(".zip")]: p for p in _members(folder)}
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and sub.name not in found and len(_members(sub)) >= 2:
            found[sub.name] = sub
    return found


def members(policy: Path) -> list[Path]:
    """A resolved policy's files: a committee directory's members (name order), else ``[policy]``.
    ``BadInput`` for a directory holding fewer than two policies."""
    if not policy.is_dir():
        return [policy]
    found = _members(policy)
    if len(found) < 2:
        raise BadInput(f"{policy} is a directory with {len(found)} policies (a .zip with its .zip.json "
                       "sidecar); a committee needs at least two")
    return found


def names() -> list[str]:
    """Names of the policies and committees found by name (a jaxlib variant answers to its base name)."""
    return sorted({name for folder in search_path() for name in _policies(folder) if not VARIANT.match(name)})


def trained_on(policy: Path) -> tuple[int, ...] | None:
    """The jaxlib version a policy file was trained on (its sidecar), or None when unrecorded."""
    try:
        meta = json.loads(Path(f"{policy}.json").read_text())
    except (OSError, ValueError):
        return None
    found = re.search(r"jaxlib-(\d+(?:\.\d+)*)", trained_xla(meta))
    return versions.parse(found.group(1)) if found else None


def for_jaxlib(candidates: list[Path], installed: tuple[int, ...]) -> Path:
    """Of one policy's jaxlib variants, the one trained on ``installed``'s minor release (``0.12.x``),
    else the one trained on the nearest release (the older on a tie); unrecorded ones come last."""
    def distance(path: Path) -> tuple:
        version = trained_on(path)
        if version is None:
            return (2, 0, ())
        gap = abs((version + (0, 0))[1] - (installed + (0, 0))[1]) + 1000 * abs(version[0] - installed[0])
        return (0 if version[:2] == installed[:2] else 1, gap, version)
    return min(candidates, key=distance)


def variant_note(name: str, path: Path) -> str | None:
    """One clause when ``name`` resolved to a jaxlib variant of that name (``find``), else None."""
    stem = path.name[: -len(".zip")] if path.name.endswith(".zip") else path.name
    if stem == name or not VARIANT.match(stem):
        return None
    version = trained_on(path)
    trained = ".".join(map(str, version)) if version else "an unrecorded jaxlib"
    return f"policy '{name}' is its variant {stem} here (trained on jaxlib {trained}, nearest this jaxlib)"


def _installed_jaxlib() -> tuple[int, ...]:
    try:
        return versions.parse(versions.installed())
    except ValueError:  # no jaxlib: the base policy
        return ()


def find(name: str) -> Path | None:
    """The policy file (or committee directory) called ``name`` (first in ``search_path()``), or None.
    Where the folder also holds ``NAME.jax-X.Y`` variants, the one for the installed jaxlib (``for_jaxlib``)."""
    for folder in search_path():
        here = _policies(folder)
        found = here.get(name)
        if found is not None:
            variants = [p for n, p in here.items()
                        if (m := VARIANT.match(n)) and m["base"] == name and p.is_file()]
            if variants and found.is_file():
                return for_jaxlib([found, *variants], _installed_jaxlib())
            return found
    return None


def default_name(target: str = "cpu", partitioned: bool = False) -> str:
    """The default policy's name for a target (``Target.key``): ``llm`` for the CPU, ``llm-h100`` for
    ``h100-...``: a policy judged by one target's pipeline is no default for another's. With
    ``partitioned``, the partitioned steps' policy of that target (``llm-spmd``, ``llm-spmd-h100``)."""
    name = str(target or "cpu").split("-")[0]
    base = PARTITIONED if partitioned else DEFAULT
    return base if name == "cpu" else f"{base}-{name}"


def default(target: str = "cpu", partitioned: bool = False) -> Path | None:
    """The shipped default policy for ``target``, or None when this installation has none. For a
    partitioned step, the partitioned steps' policy when one is shipped for the target, else the
    target's default."""
    found = find(default_name(target, partitioned=True)) if partitioned else None
    return found or find(default_name(target))


def resolve(policy: str | os.PathLike) -> Path:
    """A policy argument as a file (or a committee's directory, ``members``): an existing path, a
    path-looking value (``.zip``, a directory separator) as given (its loader reports a missing file),
    else the shipped policy or committee of that name."""
    text = str(policy)
    path = Path(text)
    if path.exists() or text.endswith(".zip") or os.sep in text or "/" in text:
        return path
    shipped = find(text)
    if shipped is None:
        available = ", ".join(names()) or "none"
        raise BadInput(f"no policy file or shipped policy named '{text}' (shipped: {available})")
    return shipped
