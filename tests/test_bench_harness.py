"""bench/'s shape and its harness (bench/harness.py): small files, results that say who made them, a
missing input refused in one line, and every benchmark still importable after a move (< 20 s, no compile)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
MAX_LINES = 400
#: Every benchmark script (the packages under bench/ are imported through them).
SCRIPTS = sorted([*BENCH.glob("*.py"), *(BENCH / "experiments").glob("*.py")])

if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
import harness  # noqa: E402


def test_no_bench_file_is_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in BENCH.rglob("*.py") if "__pycache__" not in p.parts
            for n in [len(p.read_text().splitlines())] if n > MAX_LINES}
    assert long == {}, f"split these (at most {MAX_LINES} lines a file): {long}"


def test_results_carry_command_revision_and_jax(tmp_path):
    prov = harness.Provenance.now(["--quick", "--out", "x y"], target="h100", script=str(BENCH / "perf.py"))
    assert prov.command == "python bench/perf.py --quick --out 'x y'"
    assert prov.jax == version("jax") and prov.jaxlib == version("jaxlib") and prov.target == "h100"
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert prov.revision.split("+")[0] == (rev or "?")

    drawn = []
    md_path = harness.write(tmp_path / "out", "thing", {"rows": [1, 2]}, "# Title\n\nBody.\n", prov, indent=1,
                            plot=drawn.append)
    data = json.loads((tmp_path / "out" / "thing.json").read_text())
    assert data["rows"] == [1, 2] and harness.Provenance.of(data) == prov
    md = md_path.read_text()
    assert md_path == tmp_path / "out" / "thing.md" and md.startswith("# Title\n\nMade by `python bench/perf.py")
    for text in (json.dumps(data), md):
        assert prov.command.replace("'", "") in text.replace("'", "").replace("\\", "")
        assert prov.revision in text and prov.jax in text
    assert md.rstrip().endswith("Body.") and drawn == [tmp_path / "out" / "thing.png"]
    # a Markdown without a title gets the line on top; a re-render without provenance is left as it was
    assert harness.stamp("no title\n", prov).startswith("Made by ")
    assert harness.stamp("# T\n", None) == "# T\n"


def test_a_missing_input_is_one_line_and_exit_2(tmp_path, capsys):
    present = tmp_path / "a.hlo"
    present.write_text("HloModule a\n")
    assert harness.hlo_files([tmp_path]) == [present]
    for given in ([tmp_path / "nope"], [tmp_path / "empty"]):
        (tmp_path / "empty").mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as exc:
            harness.hlo_files(given)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ": error: " in err[0] and str(given[0]) in err[0]
    with pytest.raises(SystemExit) as exc:
        harness.require([present, tmp_path / "gone.hlo"], "module")
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_every_benchmark_imports_and_the_big_ones_answer_help():
    """One child process (scripts set their own path and environment): import each script by its path,
    then ``--help`` of the split and moved ones, so a broken move fails here and not after an hour."""
    code = (
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        f"for i, path in enumerate({[str(p) for p in SCRIPTS]!r}):\n"
        "    sys.path.insert(0, path.rsplit('/', 1)[0])  # as when run: the script's own folder first\n"
        "    spec = importlib.util.spec_from_file_location(f'bench_script_{i}', path)\n"
        "    mod = importlib.util.module_from_spec(spec)\n"
        "    sys.modules[spec.name] = mod\n"
        "    spec.loader.exec_module(mod)\n"
        "import learn.train, learn.selection, learn.evaluate, learn.seeds, learn.report\n"
        "import gpu_parts.prepare, gpu_parts.timing, paper_parts.report, realscale_parts.search\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for script in ("learning.py", "gpu.py", "experiments/distill.py"):
        proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
        assert proc.returncode == 0 and "usage:" in proc.stdout, (script, proc.stderr[-1000:])


def test_every_results_markdown_names_a_command_and_a_jax_version(tmp_path):
    """Issue 53: each results/**/*.md names the command that made it and its jax (the harness's "Made by" line,
    or the line backfilled under the title), but the few in provenance_audit.INCOMPLETE, which says why."""
    import provenance_audit as audit

    def named(md: Path) -> bool:  # in the Markdown itself, not only in the JSON beside it
        text = md.read_text()
        return bool(audit.command_in(text) and audit.jax_in(text))

    found = {harness.rel(md): named(md) for md in audit.results_markdown()}
    lacking = sorted(name for name, ok in found.items() if not ok and name not in audit.INCOMPLETE)
    assert lacking == [], f"results without a command or a jax version (write them with bench/harness.py): {lacking}"
    stale = sorted(name for name in audit.INCOMPLETE if found.get(name, True))
    assert stale == [], f"complete or gone now: take them off INCOMPLETE in bench/provenance_audit.py: {stale}"
    # the check catches a results file without provenance, and passes the harness's and the backfilled line
    bare = tmp_path / "new.md"
    bare.write_text("# New\n\nRan `python bench/new.py` with jax, figures below.\n")
    assert not named(bare) and audit.audit(bare).missing == ["command", "revision", "jax"]
    prov = harness.Provenance.now(["--quick"], script=str(BENCH / "scale.py"))
    bare.write_text(harness.stamp("# New\n\nBody.\n", prov))
    assert named(bare) and audit.audit(bare).missing == []
    bare.write_text("# Old\n\nMade by `python bench/scale.py --quick` (committed in 6004418; jax 0.10.2).\n")
    assert audit.audit(bare) == audit.Row(harness.rel(bare), "", "python bench/scale.py --quick", "6004418", "0.10.2")


def test_the_effect_stage_estimates_over_instances_and_counts_a_module_without_an_answer_as_one():
    """bench/options.py --stage effect: the geometric mean of per-instance ratios, its t interval over
    instances (scipy), the answer a row stands for, later runs' rows replacing earlier ones, and a summary
    where a module whose search found nothing counts 1.0."""
    import math

    from options_parts import effect

    e = effect.estimate([math.log(x) for x in (0.94, 0.96, 0.95, 0.97, 0.93)])
    assert e["ratio"] == pytest.approx(math.exp(sum(math.log(x) for x in (0.94, 0.96, 0.95, 0.97, 0.93)) / 5))
    assert e["low"] < e["ratio"] < e["high"] < 0.98 and e["instances"] == 5
    flat = effect.estimate([math.log(x) for x in (0.90, 1.10, 0.95, 1.05)])
    assert flat["low"] < 1.0 < flat["high"]

    won = {"module": "m", "win": True, "options": {"a": "1"}, "sequence": ["p"], "found_options": {"b": "2"},
           "found_sequence": []}
    lost = {**won, "module": "n", "win": False}
    assert effect.answer_of(won) == ({"a": "1"}, ["p"]) and effect.answer_of(lost) == ({"b": "2"}, [])
    again = {**lost, "found_options": {"c": "3"}}
    rows = effect.merged_rows([{"search": [won, lost]}, {"search": [again]}])
    assert [effect.answer_of(r)[0] for r in rows] == [{"a": "1"}, {"c": "3"}]
    assert effect.search_best({"timed": [{"ratio": 0.9, "stopped": True}, {"ratio": 0.95, "stopped": False},
                                         {"ratio": 1.1, "stopped": False}]}) == 0.95

    measured = [{"effect": e, "aa": flat}, {"effect": {**flat, "ratio": 0.99}, "aa": e}]
    s = effect.effect_summary(measured, modules=5)
    assert s["median"] == 1.0 and s["below_098"] == 1 and s["estimate_095"] == 1 and s["aa_excluding_1"] == 1
    lines = "\n".join(effect.effect_lines({"effect": [{**m, "module": "x", "win": False, "claim": [None] * 3,
                                                      "search_best": None, "rounds": 10, "options": {"o": ""},
                                                      "sequence": []} for m in measured],
                                           "effect_summary": s, "effect_from": ["a.json"]}))
    assert "Median estimated ratio over the 5 modules: 1.000" in lines and "o=(empty)" in lines


def test_the_claim_stage_counts_wins_now_and_before_and_a_module_without_an_answer_as_one():
    """bench/options.py --stage claim: wins under the current claim beside the run's own, the median with
    non-wins as 1.0 both ways, and a row per module (one whose search found nothing has no claim)."""
    from options_parts import claims

    def claimed(win, ratio, n):
        return {"win": win, "ratio": ratio, "low": ratio - 0.02, "high": ratio + 0.02, "instances": n,
                "seconds": 6.0}

    old = {"win": True, "ratio": 0.95, "low": 0.94, "high": 0.96}
    rows = [{"module": "a", "path": "a.hlo", "options": {"o": "1"}, "sequence": [], "old": old,
             "claim": claimed(True, 0.90, 4)},
            {"module": "b", "path": "b.hlo", "options": {}, "sequence": ["p"], "old": old,
             "claim": claimed(False, 0.99, 6)},
            {"module": "c", "path": "c.hlo", "options": {}, "sequence": [], "old": {**old, "win": False},
             "claim": None}]
    s = claims.claim_summary(rows)
    assert (s["modules"], s["wins"], s["wins_before"], s["instances"]) == (3, 1, 2, 10)
    assert s["median"] == 1.0 and s["median_before"] == 0.95 and s["seconds"] == 12.0
    text = "\n".join(claims.claim_lines({"claim": rows, "claim_summary": s, "claim_from": ["q.json"],
                                         "command": "python bench/options.py"}))
    assert "Confirmed wins: 1 of 3 (the old claim: 2)" in text and "`q.json`" in text
    assert "| `a` | o=1 | 0.950 [0.940, 0.960] win | 0.900 [0.880, 0.920] | 4 | **win** |" in text
    assert "| `c` | XLA default (nothing found) |" in text
