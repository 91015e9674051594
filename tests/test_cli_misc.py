"""Smaller CLI surfaces: --version, third-party strategy plugins through entry points, cache pruning."""

from __future__ import annotations

import json

from conftest import GPT2, SMALL, run_cli

def test_version_names_the_distribution_and_the_compiler_it_runs_on():
    """``autotune --version``: the package index's name (``autotune`` there is another project), the
    version, and the jax/jaxlib and XLA installed here, with whether they are supported."""
    from importlib.metadata import version

    from autotune.version import DISTRIBUTION, __version__

    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first.startswith(f"xla-autotune {__version__} ") and DISTRIBUTION == "xla-autotune"
    assert version(DISTRIBUTION) == __version__  # the installed distribution is this name, at this version
    jaxlib = version("jaxlib")
    assert second.startswith(f"jax {version('jax')}, jaxlib {jaxlib}: XLA jaxlib-{jaxlib}-cpu-"), second
    assert "(supported: jax/jaxlib " in second


PLUGIN = '''
from autotune.strategy import AskTellStrategy


class FirstPassOnly(AskTellStrategy):
    """A third-party strategy: always the first action, repeated (deterministic, trivially)."""

    name = "first-pass"

    def setup(self, space, seed, budget):
        self.space = space
        self.n = 0

    def ask(self, n):
        out = []
        for _ in range(n):
            self.n += 1
            out.append((self.space.actions[0],) * (1 + self.n % self.space.max_length))
        return out

    def sequence_of(self, candidate):
        return candidate

    def tell(self, candidate, cost):
        pass
'''


def _install_plugin(root):
    """A real installed distribution (dist-info with entry_points.txt), found through PYTHONPATH."""
    (root / "thirdparty_autotune").mkdir()
    (root / "thirdparty_autotune" / "__init__.py").write_text(PLUGIN)
    info = root / "thirdparty_autotune-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-autotune\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[autotune.strategies]\nfirst-pass = thirdparty_autotune:FirstPassOnly\n")
    return {"PYTHONPATH": str(root)}


def test_third_party_strategy_registers_through_an_entry_point(tmp_path):
    env = _install_plugin(tmp_path)
    listed = json.loads(run_cli("strategies", "--json", env=env).stdout)
    entry = {s["name"]: s for s in listed}["first-pass"]
    assert entry["source"] == "entry-point" and entry["target"] == "thirdparty_autotune:FirstPassOnly"
    proc = run_cli("run", "--strategy", "first-pass", "--budget", "4", "--max-length", "3", str(SMALL),
                   "--no-validate", "--json", db=tmp_path / "c.db", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["evaluations"] == 4


def test_cache_prune_forgets_failures(tmp_path):
    db = tmp_path / "c.db"
    failed = run_cli("apply", "--passes", "gather_simplifier", str(GPT2), db=db)
    assert failed.returncode == 1 and "failed" in failed.stderr
    assert json.loads(run_cli("cache", "stats", "--json", db=db).stdout)["failed_transitions"] == {"error": 1}
    pruned = json.loads(run_cli("cache", "prune", "--failures", "--other-versions", "--json", db=db).stdout)
    assert pruned["deleted"]["failed transitions"] == 1
    stats = json.loads(run_cli("cache", "stats", "--json", db=db).stdout)
    assert stats["failed_transitions"] == {} and stats["states"] >= 1  # the good work stays


def test_cache_prune_removes_the_inventories_of_compilers_no_longer_installed(tmp_path):
    """This machine's pass inventories (one folder per compiler build): a real one written by a real run
    stays; a folder whose jaxlib is gone, one whose description cannot be read and a flat file of the
    first layout go. ``--dry-run`` says the same and removes nothing."""
    machine = tmp_path / "machine"
    env = {"AUTOTUNE_MACHINE_CACHE": str(machine)}
    assert run_cli("baseline", str(SMALL), db=tmp_path / "c.db", env=env).returncode == 0
    inventory = machine / "inventory"
    (installed,) = inventory.iterdir()
    gone = inventory / "0123456789abcdef01234567"
    gone.mkdir()
    (gone / "compiler.json").write_text(json.dumps({"jaxlib": "0.9.0", "xla_flags": "", "libraries": [
        [str(tmp_path / "removed-venv/jaxlib/xla_extension.so"), 123, 456]]}))
    (gone / "feedbeef.json").write_text("{}" * 100)
    unknown = inventory / "fedcba9876543210fedcba98"
    unknown.mkdir()
    (unknown / "abc.json").write_text("{}")
    (inventory / ("0" * 32 + ".json")).write_text("{}")

    dry = run_cli("cache", "prune", "--dry-run", db=tmp_path / "c.db", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "machine inventories: 4 files (" in dry.stdout and "would be removed" in dry.stdout
    assert "jaxlib 0.9.0 at " + str(tmp_path / "removed-venv/jaxlib") in dry.stdout
    assert "an unknown compiler (fedcba9876543210fedcba98" in dry.stdout and "first layout" in dry.stdout
    assert "would be deleted" in dry.stdout
    assert len(list(inventory.iterdir())) == 4  # nothing removed

    stale = [gone / "compiler.json", gone / "feedbeef.json", unknown / "abc.json", inventory / ("0" * 32 + ".json")]
    stale_bytes = sum(p.stat().st_size for p in stale)
    pruned = json.loads(run_cli("cache", "prune", "--json", db=tmp_path / "c.db", env=env).stdout)
    inv = pruned["inventories"]
    assert sorted(inv["files"]) == sorted(map(str, stale)) and inv["bytes"] == stale_bytes
    assert list(inventory.iterdir()) == [installed]  # the installed compiler's records stay
    again = run_cli("cache", "prune", db=tmp_path / "c.db", env=env)
    assert "machine inventories: none of a compiler no longer installed" in again.stdout
    assert run_cli("baseline", str(SMALL), db=tmp_path / "d.db", env=env).returncode == 0  # still read back


def test_the_worker_count_comes_from_the_environment_too(tmp_path):
    """``AUTOTUNE_WORKERS`` is ``--workers``' default (checked like the flag); the flag wins over it."""
    bad = run_cli("baseline", str(SMALL), db=tmp_path / "c.db", env={"AUTOTUNE_WORKERS": "0"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'--workers'" in bad.stderr, bad.stderr
    ok = run_cli("baseline", str(SMALL), "--workers", "1", db=tmp_path / "c.db", env={"AUTOTUNE_WORKERS": "0"})
    assert ok.returncode == 0, ok.stderr
