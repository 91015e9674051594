"""The CUDA plugin's import-time lines are filtered out of stderr, and nothing else is."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

NOISE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         "I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.\n")


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # as the CLI sets it (autotune.cli)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=env)


def test_the_plugin_lines_are_dropped_and_every_other_line_written_back():
    proc = _run(
        "import os\n"
        "from autotune.quiet import cuda_plugin_lines_filtered\n"
        "with cuda_plugin_lines_filtered():\n"
        f"    os.write(2, {NOISE!r}.encode() + b'a real warning\\n')\n"
        "    os.write(1, b'stdout untouched\\n')\n"
        "import sys; sys.stderr.write('after\\n')\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "a real warning\nafter\n"
    assert proc.stdout == "stdout untouched\n"


def test_an_error_inside_still_says_why():
    proc = _run("from autotune.quiet import cuda_plugin_lines_filtered\n"
                "with cuda_plugin_lines_filtered():\n"
                "    import no_such_module_here\n")
    assert proc.returncode == 1 and "No module named 'no_such_module_here'" in proc.stderr


def test_lowering_a_zoo_program_prints_nothing_on_stderr():
    """Importing jax and starting its CPU backend (the CUDA plugin is installed by `make test`) for a
    lowering leaves stderr empty."""
    proc = _run("from autotune.zoo import GPT2Config, lower\n"
                "cfg = GPT2Config(layers=1, d_model=32, heads=2, seq=16, batch=2, vocab=64)\n"
                "print(lower('gpt2', 'train', cfg).startswith('HloModule'))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True" and proc.stderr == "", proc.stderr


def test_explain_names_the_jax_version_without_printing_plugin_lines(tmp_path):
    """`autotune explain` (and `autotune run --out`, which writes explain.md) names the jax version
    in its reproduce section: read from the installed distribution, never by importing jax in the
    CLI's process (that printed the CUDA plugin's lines at the end of every run)."""
    from conftest import ROOT, run_cli

    model = ROOT / "examples" / "llm_decode_step.hlo"
    proc = run_cli("explain", str(model), "--passes", "post_scatter_expansion_simplification,cse", "--no-minimize",
                   "-o", str(tmp_path / "e.md"), db=tmp_path / "r.db")
    assert proc.returncode == 0, proc.stderr
    assert "cuda drivers" not in proc.stderr and "absl::InitializeLog" not in proc.stderr, proc.stderr
    assert "jaxlib 0." in (tmp_path / "e.md").read_text()
