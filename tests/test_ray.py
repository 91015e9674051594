"""The ray executor on a real Ray cluster (two nodes on this machine), no mocks.

One cluster per module (``ray.cluster_utils.Cluster``: a head and a second node, one CPU each), so
the two actors of the shared engine sit on different nodes and every test below goes through the
multi-node path. Real XLA steps throughout; crashes are real compiler CHECK failures and real
signals sent to the actor's process.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.conftest import GPT2, SMALL, needs_plugin, run_cli

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def ray_engine(cluster, tmp_path_factory):
    from autotune.core.engine import open_engine

    with open_engine(tmp_path_factory.mktemp("ray") / "ray.db", workers=2, executor="ray") as ev:
        yield ev


def test_the_toy_backend_runs_on_ray_like_xla(cluster, tmp_path):
    """Ray hosts whatever worker a backend names: the toy compiler's crash costs one actor there too,
    and a seeded run finds what it finds on local workers. (Runs before ``ray_engine`` holds both CPUs.)"""
    from autotune.core.engine import open_engine
    from autotune.core.tuner import tune
    from autotune.testing.toy import ToyBackend

    program = "2*x + x + x + y*1"
    args = dict(strategy="random", budget=10, seed=2, max_length=3, validate=False)
    with open_engine(tmp_path / "ray.db", workers=2, backend="toy", executor="ray") as ev:
        assert ev.pipeline.executor.name == "ray"
        root = ev.prepare(ToyBackend.module("boom*2 + x*1"))
        crashed = ev.evaluate(root, ["canon", "abort"])
        assert crashed.status == "crash" and crashed.failed_at == 1
        on_ray = tune(ev, ToyBackend.module(program), **args)
    with open_engine(tmp_path / "local.db", workers=2, backend="toy") as ev:
        local = tune(ev, ToyBackend.module(program), **args)
    assert on_ray.executor["name"] == "ray" and local.executor["name"] == "local"
    assert (on_ray.best_sequence, on_ray.evaluations) == (local.best_sequence, local.evaluations)


@needs_plugin
def test_a_gpu_target_runs_on_ray_like_locally(cluster, tmp_path):
    """The deviceless GPU worker is just another worker for Ray: its target travels with it (worker
    arguments and environment), and a seeded run finds on the actors what it finds locally."""
    from autotune.core.engine import open_engine
    from autotune.core.module import load
    from autotune.core.tuner import tune
    args = dict(strategy="random", budget=8, seed=3, max_length=3, validate=False)
    with open_engine(tmp_path / "ray.db", workers=2, executor="ray", target="h100") as ev:
        on_ray = tune(ev, load(SMALL), **args)
    with open_engine(tmp_path / "local.db", workers=2, target="h100") as ev:
        local = tune(ev, load(SMALL), **args)
    assert on_ray.executor["name"] == "ray" and on_ray.target.name == local.target.name == "h100"
    assert (on_ray.best_sequence, on_ray.evaluations, on_ray.default_cost) == \
        (local.best_sequence, local.evaluations, local.default_cost)


@pytest.mark.parametrize("strategy", ["random", "nevergrad"])
def test_same_seed_same_best_and_same_accounting_as_local(ray_engine, tmp_path, strategy):
    """The executor is invisible to the search: same trials, same best, same compiled/cached steps."""
    from autotune.core.cache import Cache
    from autotune.core.engine import open_engine
    from autotune.core.evaluator import Evaluator
    from autotune.core.module import load
    from autotune.core.tuner import tune

    args = dict(strategy=strategy, budget=16, seed=7, validate=False)
    with open_engine(tmp_path / "local.db", workers=2, executor="local") as local:
        want = tune(local, load(SMALL), **args)
    cold = Cache(tmp_path / "ray.db")  # a cold cache of its own, on the shared Ray pool
    try:
        got = tune(Evaluator(ray_engine.pipeline, cold), load(SMALL), **args)
    finally:
        cold.close()
    assert want.executor["name"] == "local" and got.executor["name"] == "ray"
    assert got.best_sequence == want.best_sequence and got.best_cost == want.best_cost
    assert got.history == want.history
    assert (got.evaluations, got.steps_compiled, got.steps_cached) == \
        (want.evaluations, want.steps_compiled, want.steps_cached)
    assert got.steps_compiled > 0


def test_compare_on_ray_runs_several_runs_at_once(ray_engine, tmp_path):
    """``compare`` with a concurrent executor keeps one run per worker in flight, each in its own
    driver thread with its own cache handle; the numbers are those of the same runs done one by one.
    (Placed before the tests that kill and hang actors: it needs every actor of the shared pool.)"""
    import threading

    from autotune.core.cache import Cache
    from autotune.core.engine import open_engine
    from autotune.core.evaluator import Evaluator
    from autotune.core.module import load
    from autotune.reporting import compare as compare_mod

    seen: set[str] = set()
    original = compare_mod._run_one

    def spy(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return original(*args, **kwargs)

    compare_mod._run_one = spy
    cold = Cache(tmp_path / "c.db")  # a cold cache of its own, on the module's Ray pool (the cluster's CPUs)
    try:
        ev = Evaluator(ray_engine.pipeline, cold)
        assert compare_mod._parallel_runs(ev) == 2
        comp = compare_mod.compare(ev, [load(SMALL)], ["random", "nevergrad"], budget=6, seeds=[0, 1],
                                   max_length=3, validate=False)
    finally:
        compare_mod._run_one = original
        cold.close()
    assert len(comp.runs) == 4 and all(r.evaluations == 6 for r in comp.runs), [(r.status, r.error) for r in comp.runs]
    assert len({n for n in seen if n.startswith("autotune-run")}) == 2  # two runs were in flight at once
    with open_engine(tmp_path / "c.db", workers=1) as ev:
        again = compare_mod.compare(ev, [load(SMALL)], ["random", "nevergrad"], budget=6, seeds=[0, 1],
                                    max_length=3, validate=False)
    assert [(r.strategy, r.seed, r.best_sequence) for r in again.runs] == \
        [(r.strategy, r.seed, r.best_sequence) for r in comp.runs]


def test_actors_span_both_nodes(ray_engine, cluster):
    from autotune.core.module import load

    pool = ray_engine.pipeline.pool
    pool.warm()
    assert len({a.node for a in pool.actors}) == 2  # one CPU per node: one actor on each
    assert ray_engine.pipeline.executor.describe()["nodes"] == 2
    root = ray_engine.prepare(load(SMALL))
    results = ray_engine.evaluate_many(root, [["dce", "cse"], ["cse", "algsimp"], ["algsimp", "dce"]])
    assert all(r.ok for r in results)


def test_compiler_fatal_error_costs_one_actor(ray_engine):
    """scatter_simplifier hits a CHECK failure (SIGABRT) on GPT-2: recorded as a crash with XLA's words."""
    from autotune.core.module import load

    root = ray_engine.prepare(load(GPT2))
    pool = ray_engine.pipeline.pool
    crashes, restarts = pool.crashes, pool.restarts
    result = ray_engine.evaluate(root, ["dce", "scatter_simplifier", "cse"])
    assert result.status == "crash" and result.failed_at == 1
    assert "Check failed" in result.message
    assert pool.crashes == crashes + 1 and pool.restarts == restarts + 1  # Ray restarted the actor
    assert ray_engine.evaluate(root, ["cse", "dce"]).ok
    again = ray_engine.evaluate(root, ["dce", "scatter_simplifier", "cse"])
    assert again.status == "crash" and again.compiled == 0  # the failure itself is cached


def test_actor_killed_mid_run_is_retried_and_the_run_goes_on(ray_engine):
    """SIGKILL from outside says nothing about the step: Ray restarts the actor, the step is retried."""
    from autotune.core.module import load

    root = ray_engine.prepare(load(SMALL))
    pool = ray_engine.pipeline.pool
    pool.warm()
    killed: list[int] = []

    def kill_once(key, pid):
        if not killed:
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)

    pool.on_start = kill_once
    restarts = pool.restarts
    try:
        result = ray_engine.evaluate(root, ["tuple-simplifier", "dce", "zero_sized_hlo_elimination"])
    finally:
        pool.on_start = None
    assert killed and result.ok, result.message
    assert pool.restarts == restarts + 1
    assert killed[0] not in pool.pids()  # the killed process was replaced by a new incarnation


def test_hung_step_is_cancelled_by_the_step_timeout(ray_engine):
    from autotune.core.module import load

    root = ray_engine.prepare(load(SMALL))
    pipeline = ray_engine.pipeline
    pool = pipeline.pool
    pool.warm()
    stopped: list[int] = []

    def stop_once(key, pid):
        if not stopped:
            stopped.append(pid)
            os.kill(pid, signal.SIGSTOP)

    timeouts, old = pool.timeouts, pipeline.step_timeout
    pipeline.step_timeout, pool.on_start = 3.0, stop_once
    try:
        result = ray_engine.evaluate(root, ["while-loop-constant-sinking"])
    finally:
        pipeline.step_timeout, pool.on_start = old, None
    assert result.status == "timeout" and "limit" in result.message
    assert pool.timeouts == timeouts + 1
    assert ray_engine.evaluate(root, ["cse", "while-loop-constant-sinking"]).ok  # the actor came back


def test_cli_run_on_the_cluster_says_which_executor_ran_it(ray_engine, cluster, tmp_path):
    ray_engine.pipeline.close()  # give the cluster's CPUs to the CLI's own actors
    proc = run_cli("run", "--executor", "ray", "--ray-address", cluster.address, "--budget", "50", "--seed", "1", "--objective", "ops", "--no-validate",
                   "--workers", "2", str(SMALL), "--json", db=tmp_path / "cli.db")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["executor"]["name"] == "ray" and data["executor"]["nodes"] == 2
    assert data["evaluations"] == 50 and data["steps_compiled"] > 0


def test_unreachable_address_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("run", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--budget", "5", str(SMALL),
                   db=tmp_path / "c.db", env={"AUTOTUNE_RAY_ADDRESS": ""})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach a Ray cluster at 127.0.0.1:1" in lines[0]
    assert not (tmp_path / "c.db").exists()  # refused before anything was opened
