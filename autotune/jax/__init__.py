"""Use tuning records inside a JAX program: ``jax.jit`` compiles pick up tuned sequences.

    records = [autotune.TuningRecord.load("tuned.json")]
    with autotune.jax.use(records):
        step = jax.jit(train_step)
        step(params, batch)          # compiled from the tuned module when its fingerprint matches

How, and why this way. jaxlib offers ``jax.extend.xla.register_hlo_module_transformation``, but
its callback sees a module only at the pre-scheduler stage, i.e. *after* XLA's HLO pipeline has
run: the original program can no longer be recognised (its fingerprint is that of the optimised
module) and a pass sequence can no longer be run *instead of* the default one. So the hook works
one level up, at the single function through which every ``jax.jit`` compile passes in the pinned
jax (``jax._src.compiler.backend_compile_and_load``): it converts the lowered StableHLO to HLO,
normalises and fingerprints it like ``autotune.load`` does, and when a record matches, applies the
recorded sequence (in autotune's crash-isolated workers, through the cache) and hands XLA the
tuned module to compile with its full pipeline. Everything else compiles untouched.

With a policy (``use(policy="llm")``, a shipped policy's name or a ``.zip`` path, records optional):
a compile no record matches gets the policy's ONE deterministic roll-out (at most its
``max_length`` steps, through the cache; no search, no fine-tuning; a committee such as
``policy="llm-committee"`` rolls out each member), and the best sequence of that roll-out is used only when it beats XLA's default on the objective and passes the check
(autotune's validation); otherwise XLA's default compiles the module. The decision is remembered
in the cache db by module fingerprint (with the policy's digest and the pipeline version), so the
next compile of the same program, in this process or another, costs one lookup.

Targets: a compile is tuned for the machine that compiles it. A CPU compile uses records and
policies judged for the CPU; a GPU compile (jax's CUDA backend) uses those judged for that GPU: the
target is ``use(target=...)`` or, by default, the shipped target whose device name is the device's
(``NVIDIA H100 80GB HBM3`` -> ``h100``). A record or policy judged for another target is never applied
(``HookStats.other_target``); a GPU no shipped target describes is passed through.

The tuning store (``autotune.core.store``): ``use()`` with no records (and no policy) looks every
compile up in the per-user store (``$AUTOTUNE_STORE``; ``store=`` moves it, ``store=False`` turns it
off). An entry made on this host by this XLA is applied; one made elsewhere is not (``HookStats.foreign``
says why: ``autotune check`` judges it); an entry that keeps XLA's default compiles the module untouched.
``autotune.jax.tune`` fills the store; ``autotune capture``/``tune``/``exec`` do it for a whole script.

Which path a record takes (``HookStats.applied_via``): a record of compiler options alone leaves the
module as it is and adds its options to the compile's ``CompileOptions.env_option_overrides``, the field
jax's public ``jax.jit(f).lower(...).compile(compiler_options=...)`` fills ("compiler_options"; and
``autotune.jax.compile`` takes that public call itself); only a record with a pass sequence replaces the
module handed to XLA ("compile-patch").

Limits: compiles already in JAX's caches are not redone (``use`` clears JAX's in-memory caches on
entry unless ``clear_caches=False``); multi-device (sharded) compiles are passed through.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autotune.core.backend import supports
from autotune.core.options import CompilerOptions
from autotune.core.record import TuningRecord
from autotune.pipelines.xla import hlo, loader, loops, site_hook, sites, targets
from autotune.pipelines.xla.versions import check_supported
from autotune import policies
from autotune.rl.ensemble import check_members
from autotune.rl.train import check_vocabulary, read_sidecar
from autotune.core.tuner import tune as _core_tune
from autotune.core.store import Host, Store
from autotune.api import Session


@dataclass
class HookStats:
    """What the hook did, for tests and for users who want to know."""

    seen: list[str] = field(default_factory=list)  # normalised fingerprints of every compile seen
    applied: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (fingerprint, sequence)
    passed_through: int = 0
    errors: list[str] = field(default_factory=list)
    # With a policy: (fingerprint, sequence or () for XLA's default, "rollout" | "remembered").
    policy_decisions: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)
    # Records matching a compile's module but judged for another target: (fingerprint, their target).
    other_target: list[tuple[str, str]] = field(default_factory=list)
    # The target each tuned or considered compile was judged for: fingerprint -> Target.key.
    targets: dict[str, str] = field(default_factory=dict)
    # Compiler options a record added to a compile: fingerprint -> {name: value}.
    options: dict[str, dict] = field(default_factory=dict)
    # How each applied record reached XLA: fingerprint -> "compiler_options" (options alone, the module
    # untouched: jax's compiler_options field), "compile-patch" (a pass sequence: the module replaced) or
    # "site-decisions" (per-site decisions: the normalised module, rewritten at XLA's pre-scheduler stage).
    applied_via: dict[str, str] = field(default_factory=dict)
    # Per-site decisions a compile applied, and those whose site it did not hold: fingerprint -> names.
    sites_applied: dict[str, tuple] = field(default_factory=dict)
    sites_missing: dict[str, tuple] = field(default_factory=dict)
    # Decided compiles whose donation this jaxlib's transformation dropped (``versions.HOOK_KEEPS_ALIASING``:
    # 0.10): their fingerprints. The program runs the same, with each aliased buffer copied every step.
    donation_dropped: list[str] = field(default_factory=list)
    # Loops unrolled in the module before it was compiled (``site:unroll:...``): fingerprint -> while names.
    loops_applied: dict[str, tuple] = field(default_factory=dict)
    # Store entries that say "keep XLA's default" for a compile: their fingerprints (compiled untouched).
    kept_default: list[str] = field(default_factory=list)
    # Store entries matching a compile but made on another host or by another XLA: (fingerprint, why).
    foreign: list[tuple[str, str]] = field(default_factory=list)
    # The store the hook looked compiles up in (None: records only).
    store: str | None = None

    def summary(self) -> str:
        """One line for a person (``autotune exec`` prints it at exit): what was applied, and how."""
        via = [v for v in self.applied_via.values()]
        parts = [f"{len(self.seen)} compile(s) seen", f"{len(self.applied_via)} tuned"
                 + (f" ({via.count('compiler_options')} via compiler_options, {via.count('compile-patch')} via "
                    "the compile patch" + (f", {via.count('site-decisions')} with per-site decisions"
                                           if 'site-decisions' in via else "") + ")" if via else "")]
        if self.loops_applied:
            parts.append(f"{sum(map(len, self.loops_applied.values()))} loop(s) unrolled")
        if self.kept_default:
            parts.append(f"{len(self.kept_default)} kept XLA's default (tuned before, no confirmed win)")
        if self.foreign:
            parts.append(f"{len(self.foreign)} store entr{'y' if len(self.foreign) == 1 else 'ies'} not applied "
                         f"({self.foreign[0][1]}; `autotune check` judges it)")
        if self.errors:
            parts.append(f"{len(self.errors)} error(s): {self.errors[0]}")
        return "autotune: " + ", ".join(parts) + (f"; store {self.store}" if self.store else "")


#: ``Cache.put_report`` kind of the remembered policy decisions.
DECISION_KIND = "jax-policy-decision"


class _PolicyDecider:
    """A policy's zero-shot decision for a module: its roll-out's best sequence, or () for XLA's default.
    A committee (``autotune.policies.members``) rolls out each member and keeps the best, at one
    roll-out's budget per member."""

    def __init__(self, policy, objective: str):
        self.path = policies.resolve(policy)
        self.members = policies.members(self.path)
        metas = [read_sidecar(m) for m in self.members]  # BadInput at use() for a missing or foreign file
        if len(self.members) > 1:
            check_members(self.members, metas)
        self.meta = metas[0]
        digest = hashlib.sha256()
        for member in self.members:
            digest.update(member.read_bytes())
        self.digest = digest.hexdigest()[:16]
        self.objective = objective
        self.checked = False

    def key(self, evaluator, fingerprint: str) -> str:
        return f"{evaluator.version}|{self.digest}|{self.objective}|{fingerprint}"

    def decide(self, evaluator, root, stats: HookStats) -> tuple[str, ...]:
        key = self.key(evaluator, root.fingerprint)
        remembered = evaluator.cache.get_report(DECISION_KIND, key)
        if remembered is not None:
            sequence = tuple(remembered["sequence"])
            stats.policy_decisions.append((root.fingerprint, sequence, "remembered"))
            return sequence
        if not self.checked:
            check_vocabulary(self.meta, evaluator.pipeline.passes(), self.path, evaluator.pipeline.target.key)
            self.checked = True
        max_length = int(self.meta.get("max_length", 16))
        result = _core_tune(evaluator, root, strategy="ppo", budget=max_length * len(self.members),
                      objective=self.objective, max_length=max_length,
                      options={"policy": str(self.path), "finetune": False}, validate=True, prune=True)
        validation = result.validation
        keep = bool(result.beats_default and validation is not None and validation.ok)
        sequence = tuple(result.best_sequence) if keep else ()
        reason = ("beats XLA's default" if keep else
                  "fails its check" if result.beats_default else "does not beat XLA's default")
        # The roll-out as the policy proposed it (``best.sequence`` is empty when it ties the default).
        rollout = list(result.best.found or result.best.sequence) if result.best else []
        evaluator.cache.put_report(DECISION_KIND, key, {
            "sequence": list(sequence), "rollout": rollout, "reason": reason,
            "cost": result.best.cost if result.best else None, "default_cost": result.default_cost,
            "validation": validation.level if validation else None, "run_id": result.run_id,
            "policy": self.path.name})
        stats.policy_decisions.append((root.fingerprint, sequence, "rollout"))
        return sequence


def target_of(backend, devices, explicit: str | None = None) -> str | None:
    """The ``--target`` a compile on ``backend`` is tuned for: ``cpu`` for the CPU backend; for a GPU,
    ``explicit`` or the shipped target named after the device (None: no target describes it)."""
    platform = str(getattr(backend, "platform", "cpu")).lower()
    if platform == "cpu":
        return "cpu"
    if platform not in ("gpu", "cuda"):
        return None
    if explicit:
        return explicit
    kind = str(getattr(devices[0], "device_kind", "")) if len(devices) else ""
    return targets.for_device(kind)


class _Hook:
    def __init__(self, records: Iterable[TuningRecord | str | Path], cache, workers: int, strict: bool,
                 policy=None, objective: str = "final-ops", target: str | None = None, store: Store | None = None):
        recs = [r if isinstance(r, TuningRecord) else TuningRecord.load(r) for r in records]
        self.records = {fp: r for r in recs for fp in r.applies_to}  # a fleet record: every member
        self.cache, self.workers, self.strict, self.target = cache, workers, strict, target
        self.decider = _PolicyDecider(policy, objective) if policy is not None else None
        self.store = store
        self.stats = HookStats(store=str(store.root) if store is not None else None)
        self._entries = None  # the store's entries, read once at the first compile
        self._host = Host.here() if store is not None else None
        self._sessions: dict[str, object] = {}
        self._lock = threading.RLock()

    def session(self, target: str = "cpu"):
        """One warm session per target the program compiles for (its pipeline judges that target)."""
        if target not in self._sessions:
            self._sessions[target] = Session(self.cache, self.workers, target=None if target == "cpu" else target)
        return self._sessions[target]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def compile(self, original, backend, module, executable_devices, options, host_callbacks):
        if self.store is not None and not self.records and self.decider is None and not self._store_entries():
            self.stats.passed_through += 1  # an empty store, nothing else: no session, no fingerprint, no cost
            return original(backend, module, executable_devices, options, host_callbacks)
        target = target_of(backend, executable_devices, self.target) if len(executable_devices) == 1 else None
        if target is None:
            self.stats.passed_through += 1
            return original(backend, module, executable_devices, options, host_callbacks)
        with self._lock:
            try:
                tuned_mlir, extra = self._tuned(module, target)
            except Exception as exc:  # never break the user's program over a tuning problem
                if self.strict:
                    raise
                self.stats.errors.append(f"{type(exc).__name__}: {exc}")
                tuned_mlir, extra = None, {}
        if tuned_mlir is None and not extra:
            self.stats.passed_through += 1
            return original(backend, module, executable_devices, options, host_callbacks)
        extra, decisions = _split_sites(extra)
        if extra:  # the record's compiler options on top of the compile's own (jax's compiler_options)
            options = with_overrides(options, extra)
        program = tuned_mlir if tuned_mlir is not None else module
        kwargs = {"host_callbacks": host_callbacks} if host_callbacks else {}
        if not decisions:
            return backend.compile_and_load(program, executable_devices=executable_devices, compile_options=options,
                                            **kwargs)
        with site_hook.deciding(decisions) as report:
            compiled = backend.compile_and_load(program, executable_devices=executable_devices,
                                                compile_options=options, **kwargs)
        fingerprint = self.stats.seen[-1] if self.stats.seen else "?"
        self.stats.sites_applied[fingerprint] = report[0].applied if report else ()
        self.stats.sites_missing[fingerprint] = report[0].missing if report else tuple(decisions)
        if report and report[0].aliasing_dropped:
            self.stats.donation_dropped.append(fingerprint)
        return compiled

    def _tuned(self, module, target: str) -> tuple[bytes | None, dict]:
        """``(the tuned module as MLIR or None to compile the original, compiler options to add)``."""
        from jax._src.interpreters import mlir as jax_mlir
        from jax._src.lib import _jax

        session = self.session(target)
        proto = hlo.from_mlir(jax_mlir.module_to_bytecode(module))
        root = session.normalize(loader.module_from_proto(proto))
        self.stats.seen.append(root.fingerprint)
        self.stats.targets[root.fingerprint] = session.target.key
        record = self.records.get(root.fingerprint)
        if record is None and self.store is not None:
            record = self._from_store(root.fingerprint, session)
            if record is not None and not record.sequence and not record.compiler_options:
                self.stats.kept_default.append(root.fingerprint)
                return None, {}  # tuned before, nothing confirmed won: XLA's default, untouched
        if record is not None and record.target != session.target.key:
            self.stats.other_target.append((root.fingerprint, record.target))
            record = None  # judged for another machine: never applied here
        extra: dict = {}
        if record is not None:
            sequence = tuple(record.sequence)
            extra = self._options_of(record, session)
        elif self.decider is not None:
            sequence = self.decider.decide(session.evaluator, root, self.stats)
            if not sequence:
                return None, {}  # XLA's default: the policy's sequence did not beat it or failed its check
        else:
            return None, {}
        self.stats.applied.append((root.fingerprint, sequence))
        if extra:
            self.stats.options[root.fingerprint] = dict(extra)
        if any(sites.is_site_option(k) for k in extra):
            # Per-site decisions name the normalised module's instructions: XLA compiles that module (after
            # the sequence, if any), and the decisions are applied where it hands out its optimised form.
            self.stats.applied_via[root.fingerprint] = "site-decisions"
            program = session.apply(root, sequence) if sequence else root
            _, _, unrolls = sites.split(extra.items())
            proto_ = program.proto
            if unrolls:  # loop decisions rewrite the module itself, before XLA's pipeline (loops.py)
                proto_, done = loops.apply(proto_, unrolls)
                self.stats.loops_applied[root.fingerprint] = done.applied
            return _jax.mlir.hlo_to_stablehlo(sites.tag(proto_)), extra
        if not sequence:  # a record of compiler options alone: the original module, compiled with them
            if extra:
                self.stats.applied_via[root.fingerprint] = "compiler_options"
            return None, extra
        self.stats.applied_via[root.fingerprint] = "compile-patch"
        tuned = session.apply(root, sequence)
        return _jax.mlir.hlo_to_stablehlo(tuned.proto), extra

    def _store_entries(self) -> list:
        """The store's entries, read once (at the first compile); an unreadable file is skipped and said."""
        if self.store is None:
            return []
        if self._entries is None:
            entries, bad = self.store.scan()
            self._entries = entries
            self.stats.errors.extend(f"store entry skipped: {why}" for _, why in bad)
        return self._entries

    def _from_store(self, fingerprint: str, session) -> TuningRecord | None:
        """The store's entry for this compile made here by this XLA; entries made elsewhere are said."""
        hit = self.store.lookup(fingerprint, session.target.key, session.evaluator.pipeline.compiler_version,
                                self._host, self._store_entries())
        self.stats.foreign.extend((fingerprint, why) for _, why in hit.foreign)
        return hit.entry.record if hit.entry else None

    def _options_of(self, record: TuningRecord, session) -> dict:
        """The record's compiler options this XLA takes (one it lacks is left out and said in ``errors``)."""
        kept = {}
        for name, value in record.compiler_options.items():
            try:
                backend = session.evaluator.pipeline
                if supports(backend, "options"):
                    backend.check_options(CompilerOptions.of({name: value}))
                kept[name] = value
            except Exception as exc:
                self.stats.errors.append(f"compiler option {name}={value} left out: {exc}")
        return kept


def _split_sites(extra: dict) -> tuple[dict, dict]:
    """``(XLA's own options, {instruction: library choice})`` of a record's compiler options (its loop
    decisions were applied to the module by ``_tuned``)."""
    plain, decisions, _unrolls = sites.split(extra.items())
    return dict(plain), decisions


def with_overrides(options, extra: dict):
    """A copy of jax's ``CompileOptions`` with ``extra`` compiler options added to its ``env_option_overrides``
    (``jax.jit(...).lower(...).compile(compiler_options=...)`` sets the same field); the record's value wins
    over one the program set itself."""
    from jax._src.lib import _jax

    copied = _jax.CompileOptions.ParseFromString(options.SerializeAsString())
    kept = [(k, v) for k, v in copied.env_option_overrides if k not in extra]
    copied.env_option_overrides = kept + [(str(k), str(v)) for k, v in extra.items()]
    return copied


_active: list[_Hook] = []


@contextlib.contextmanager
def use(records: Iterable[TuningRecord | str | Path] | None = None, cache: str | Path | None = None, workers: int = 1,
        clear_caches: bool = True, strict: bool = False, policy: str | Path | None = None,
        objective: str = "final-ops", target: str | None = None,
        store: Store | str | Path | bool | None = None) -> Iterator[HookStats]:
    """Apply ``records`` to matching ``jax.jit`` compiles inside the ``with`` block; with ``policy``
    (a shipped policy's name or a path), every other compile gets the policy's zero-shot decision
    (see the module docstring), remembered by fingerprint in the cache db.

    Yields ``HookStats`` (which compiles were seen, which were tuned, what the policy decided).
    ``strict=True`` raises instead of falling back to the untuned compile when tuning a matching
    module fails. ``target``: what a GPU compile is tuned for (default: the shipped target named
    after the compiling device); CPU compiles are always tuned for the CPU. ``store``: the tuning store
    to look compiles up in (a path or ``Store``; ``True``: the default store); by default the store is
    used when neither ``records`` (not even ``[]``) nor ``policy`` is given, ``store=False`` never.
    """
    import jax
    from jax._src import compiler

    check_supported()  # BadInput naming the supported range before any compile is touched
    if store is None:  # ``use()``: the store; ``use([])`` or records or a policy: not unless asked
        store = records is None and policy is None
    records = list(records or ())
    if store is False:
        store = None
    elif not isinstance(store, Store):
        store = Store(None if store is True else store)
    hook = _Hook(records, cache, workers, strict, policy, objective, target, store)
    original = compiler.backend_compile_and_load

    def patched(backend, module, executable_devices, options, host_callbacks):
        return hook.compile(original, backend, module, executable_devices, options, host_callbacks)

    if clear_caches:
        jax.clear_caches()
    compiler.backend_compile_and_load = patched
    _active.append(hook)
    try:
        yield hook.stats
    finally:
        compiler.backend_compile_and_load = original
        _active.remove(hook)
        hook.close()
        if clear_caches:
            jax.clear_caches()


from autotune.jax.tuning import Tuned, lower, tune  # noqa: E402  (the one call)


def compile(fn, *args, static_argnums=None, static_argnames=None, store: Store | str | Path | None = None,
            cache: str | Path | None = None, **kwargs):
    """``(compiled, applied_via)``: ``fn`` lowered for these arguments and compiled with its store entry.
    Options alone: jax's public ``Lowered.compile(compiler_options=...)`` (``"compiler_options"``); a pass
    sequence: through the hook (``"compile-patch"``); no entry or "keep XLA's default": a plain compile
    (``None``)."""
    st = store if isinstance(store, Store) else Store(store)
    lowered = lower(fn, args, kwargs, static_argnums, static_argnames)
    with Session(cache, 1) as s:
        root = s.normalize(lowered)
        hit = st.lookup(root.fingerprint, s.target.key, s.evaluator.pipeline.compiler_version)
    record = hit.entry.record if hit.entry is not None else None
    if record is None or (not record.sequence and not record.compiler_options):
        return lowered.compile(), None
    if not record.sequence and not any(sites.is_site_option(k) for k in record.compiler_options):
        return lowered.compile(compiler_options=dict(record.compiler_options)), "compiler_options"
    with use([record], cache=cache, store=False, clear_caches=False, strict=True) as stats:
        compiled = lowered.compile()
    return compiled, stats.applied_via.get(root.fingerprint, "compile-patch")

__all__ = ["HookStats", "Tuned", "compile", "target_of", "tune", "use", "with_overrides"]
