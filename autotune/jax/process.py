"""A whole program, unmodified: capture what it compiles, or run it with the tuning store applied.

Started inside the program by jax itself (``jax_plugins`` discovery: ``autotune.jax.plugin`` once the
package is installed, or the ``bootstrap`` folder ``autotune capture``/``exec`` put on ``PYTHONPATH``),
before its first compile, and driven by the environment:

- ``AUTOTUNE_CAPTURE=DIR``: every module jax compiles is written to DIR as HLO text (``NNN-name.hlo``)
  with ``index.json``: its argument shapes, how often it was compiled and run, and the seconds its runs
  took (each run is timed to its outputs' completion: a profiling run, slower than the program's own;
  jax's C++ dispatch fast path is turned off for it so that every run passes through the timer).
  ``autotune tune DIR`` tunes them, most time first.
- ``AUTOTUNE=1``: ``autotune.jax.use()`` for the whole process, the store applied.

Either prints one line to stderr at exit saying what it did (``AUTOTUNE_REPORT=FILE`` also writes it as
JSON). The variables are removed from this process's environment once read, so the compiler workers
autotune starts (and any process the program starts) are not hooked again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

CAPTURE_ENV = "AUTOTUNE_CAPTURE"
APPLY_ENV = "AUTOTUNE"
REPORT_ENV = "AUTOTUNE_REPORT"
STORE_ENV = "AUTOTUNE_STORE"
INDEX = "index.json"
#: The folder whose ``jax_plugins/autotune_hook`` jax discovers (``autotune capture``/``exec`` put it on PYTHONPATH).
BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap"

_installed = False


def install_from_env() -> None:
    """Install what the environment asks for, once per process; a failure is one line, never the program's."""
    global _installed
    if _installed:
        return
    capture = os.environ.pop(CAPTURE_ENV, None)
    apply = os.environ.pop(APPLY_ENV, None) == "1"
    report = os.environ.pop(REPORT_ENV, None)
    _drop_bootstrap_from_path()
    if not capture and not apply:
        return
    _installed = True
    try:
        if capture:
            Capture(Path(capture), report).install()
        elif apply:
            _apply_store(report)
    except Exception as exc:  # the program runs as it would have, and says why autotune did not
        print(f"autotune: not active ({type(exc).__name__}: {exc})", file=sys.stderr)


def _drop_bootstrap_from_path() -> None:
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != BOOTSTRAP]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)


def _write_report(report: str | None, data: dict) -> None:
    if report:
        try:
            Path(report).write_text(json.dumps(data, indent=2, default=str))
        except OSError as exc:
            print(f"autotune: cannot write {report} ({exc.strerror or exc})", file=sys.stderr)


def _apply_store(report: str | None) -> None:
    from autotune.jax import use

    context = use()  # no records: the store ($AUTOTUNE_STORE or the user's); clears jax's (empty) caches
    stats = context.__enter__()

    def done():
        try:
            print(stats.summary(), file=sys.stderr)
            _write_report(report, {"mode": "exec", "seen": len(stats.seen), "applied_via": stats.applied_via,
                                   "options": stats.options, "kept_default": stats.kept_default,
                                   "foreign": stats.foreign, "errors": stats.errors, "store": stats.store,
                                   "passed_through": stats.passed_through})
        finally:
            context.__exit__(None, None, None)

    atexit.register(done)


class Capture:
    """Writes each module the program compiles, and times its runs (see the module doc)."""

    def __init__(self, out: Path, report: str | None = None):
        self.out, self.report = out, report
        self.modules: dict[str, dict] = {}  # HLO digest -> entry of index.json
        self.by_executable: dict[int, str] = {}  # id(LoadedExecutable) -> digest
        self.lock = threading.Lock()
        self.timed = False

    def install(self) -> None:
        from jax._src import compiler

        self.out.mkdir(parents=True, exist_ok=True)
        original = compiler.backend_compile_and_load

        def patched(backend, module, executable_devices, options, host_callbacks):
            t0 = time.perf_counter()
            executable = original(backend, module, executable_devices, options, host_callbacks)
            try:
                self._compiled(module, executable, time.perf_counter() - t0, len(executable_devices))
            except Exception as exc:  # a module that cannot be written is said, the program goes on
                print(f"autotune capture: a module was not written ({type(exc).__name__}: {exc})", file=sys.stderr)
            return executable

        compiler.backend_compile_and_load = patched
        self.timed = self._time_runs()
        atexit.register(self.finish)

    def _time_runs(self) -> bool:
        """Route every run through ``ExecuteReplicated.__call__`` and time it there (jax internals: when
        they differ in this jax, runs are not counted and the index says so)."""
        try:
            from jax._src import pjit
            from jax._src.interpreters import pxla

            call = pxla.ExecuteReplicated.__call__
            capture = self

            def timed(self, *args):
                t0 = time.perf_counter()
                out = call(self, *args)
                try:
                    import jax

                    jax.block_until_ready(out)
                except Exception:
                    pass
                capture._ran(self.xla_executable, time.perf_counter() - t0)
                return out

            pjit._get_fastpath_data = lambda *a, **k: None
            pxla.ExecuteReplicated.__call__ = timed
            return True
        except Exception:
            return False

    def _compiled(self, module, executable, seconds: float, devices: int) -> None:
        from jax._src.interpreters import mlir as jax_mlir

        from autotune.pipelines.xla import hlo

        proto = hlo.from_mlir(jax_mlir.module_to_bytecode(module))
        parsed = hlo.parse_proto(proto)
        text = hlo.to_text(parsed)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self.lock:
            entry = self.modules.get(digest)
            if entry is None:
                name = "".join(c if c.isalnum() or c in "._-" else "_" for c in parsed.name)[:60]
                entry = {"file": f"{len(self.modules):03d}-{name}.hlo", "name": parsed.name, "digest": digest,
                         "arguments": _arguments(module), "devices": devices, "compiles": 0,
                         "compile_seconds": 0.0, "runs": 0, "run_seconds": 0.0}
                (self.out / entry["file"]).write_text(text)
                self.modules[digest] = entry
            entry["compiles"] += 1
            entry["compile_seconds"] += seconds
            self.by_executable[id(executable)] = digest
            self._write_index()

    def _ran(self, executable, seconds: float) -> None:
        with self.lock:
            digest = self.by_executable.get(id(executable))
            if digest is not None:
                self.modules[digest]["runs"] += 1
                self.modules[digest]["run_seconds"] += seconds

    def _write_index(self) -> None:
        modules = sorted(self.modules.values(), key=lambda m: -m["run_seconds"])
        data = {"format": 1, "runs_timed": self.timed, "argv": sys.argv, "modules": modules}
        tmp = self.out / f".{INDEX}.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, self.out / INDEX)

    def finish(self) -> None:
        with self.lock:
            self._write_index()
        total = sum(m["run_seconds"] for m in self.modules.values())
        runs = sum(m["runs"] for m in self.modules.values())
        print(f"autotune capture: {len(self.modules)} module(s) written to {self.out}, {runs} run(s), "
              f"{total:.2f} s in them" + ("" if self.timed else " (runs not timed in this jax)"), file=sys.stderr)
        _write_report(self.report, {"mode": "capture", "modules": len(self.modules), "runs": runs,
                                    "run_seconds": total, "out": str(self.out)})


def _arguments(module) -> list[str]:
    """The entry function's argument types as MLIR prints them (``tensor<8x128xf32>``)."""
    try:
        for op in module.body.operations:
            if str(op.attributes["sym_name"]).strip('"') == "main":
                return [str(t) for t in op.type.inputs]
    except Exception:
        pass
    return []


def read_index(folder: Path) -> list[dict]:
    """The captured modules of ``folder``, most run time first; ``BadInput`` when it holds no capture."""
    from autotune.errors import BadInput

    index = Path(folder) / INDEX
    if not Path(folder).is_dir():
        raise BadInput(f"{folder}: no such capture folder (make one with `autotune capture -o {folder} -- python ...`)")
    if not index.is_file():
        raise BadInput(f"{folder}: not a capture folder (no {INDEX}; make one with `autotune capture`)")
    try:
        data = json.loads(index.read_text())
        modules = list(data["modules"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{index}: not a capture index ({exc})") from None
    return sorted(modules, key=lambda m: (-float(m.get("run_seconds", 0.0)), m.get("file", "")))
