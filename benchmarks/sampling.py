"""Sampling throughput of hierl's PolicyEvaluator against hand-written rollout loops.

Measured: actions/s (env steps x sub-envs), timed with ``time.perf_counter`` after a
warm-up.  Candidates that are compared take turns chunk by chunk (one ``sample()`` or one
raw fragment each) for ``--seconds`` of their own time per round; a candidate's figure is
the median over ``--rounds`` rounds, and every ratio is a same-run ratio, so background
load on this shared machine hits both sides alike.  "best-chunk" ratios compare each
side's fastest single chunk, a second, nearly noise-free estimate.

a) Pendulum-v1, 64 sub-envs in one ``gymnasium.vector.SyncVectorEnv(copy=False,
   autoreset_mode=SAME_STEP)`` (hierl builds its subclass ``SameStepVectorEnv``, which
   steps the same sub-envs with fewer Python calls, for ``num_envs_per_evaluator=64``), a
   64x64 tanh ActorCritic, one evaluator in this process, ``torch.set_num_threads(1)``:

   * raw loop: obs -> ``torch.no_grad`` forward -> Normal sample -> clip -> ``venv.step``
     (numpy <-> torch conversions included) on Gymnasium's own SyncVectorEnv, as a user
     writes it;
   * ``PolicyEvaluator.sample()`` with a TorchPolicyGraph subclass that has a trivial loss
     and no ``postprocess_trajectory`` (so the sampler skips per-segment postprocessing).
     Target: evaluator / raw >= 0.9;
   * the same with PPOPolicy, i.e. *including* GAE postprocessing (informative; the 0.9
     target is about the rollout loop itself).

b) The same evaluator as 1 and 2 Ray actors (``num_cpus=1`` each, Ray started with
   ``num_cpus=2``): aggregate actions/s of rounds ``ray.get([e.sample.remote() ...])``
   (batches fetched to the driver) after a warm-up round.  Target: 2 actors >= 1.8x one.
   Also measured, for context: an in-process evaluator taking turns with the actors (the
   cost of running as an actor: batch serialisation, object store, task round trip); the
   machine's own ceiling for the 2-vs-1 pattern, i.e. the raw loop in 1 vs 2 plain
   processes (no Ray, no hierl); and the CPU cores used by the actors, the driver, Ray's
   other processes and everything else (background load) with 1 and with 2 actors busy.

c) A natively vectorised env, ``gymnasium.make_vec("CartPole-v1", num_envs=1024,
   vectorization_mode="vector_entry_point")`` (NEXT_STEP autoreset) returned by an env
   creator, the same 64x64 tanh model with Categorical sampling from the logits:
   raw loop vs ``PolicyEvaluator.sample()`` in this process (target >= 0.8x), PPOPolicy
   (informative), and 1 vs 2 remote evaluators as in b).

Actions are counted the same way for raw loop and evaluator (steps x sub-envs); with
NEXT_STEP autoreset the evaluator drops the reset rows from its batch, so its *row*
throughput is also reported.  The raw loops use ``validate_args=False`` distributions,
the fastest straightforward hand-written code, which makes the ratios conservative.

If an in-process ratio misses its target (or with ``--profile always``) ``evaluator.sample()``
is run under cProfile and the top functions (by internal time) are printed and recorded.

Usage::

    .venv/bin/python benchmarks/sampling.py            # ~5-6 minutes
    .venv/bin/python benchmarks/sampling.py --quick    # ~1.5 minutes smoke run
    .venv/bin/python benchmarks/sampling.py --skip-remote --profile always
    .venv/bin/python benchmarks/sampling.py --quick --record  # + benchmarks/records/

Results: ``benchmarks/results/sampling[_quick].json`` and ``.png`` charts next to it;
with ``--record`` the JSON is also copied to ``benchmarks/records/`` (committed, shown
on the docs' benchmark results page).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

# benchmarks/ is sys.path[0] when run as a script; make `common` importable either way.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    RECORD_HELP,
    RESULTS_DIR,
    CpuMeter,
    bar_png,
    process_tree,
    record,
    wait_for_quiet,
)

from hierl.algorithms.ppo import PPOConfig, PPOPolicy
from hierl.evaluators.policy_evaluator import PolicyEvaluator
from hierl.evaluators.spec import EvaluatorSpec
from hierl.models import ActorCritic, ModelConfig
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TensorBatch, TorchPolicyGraph

PENDULUM_ENVS = 64
CARTPOLE_ENVS = 1024
PENDULUM_FRAGMENT = 100
CARTPOLE_FRAGMENT = 50
MODEL = ModelConfig(hiddens=(64, 64), activation="tanh")

TARGET_PENDULUM = 0.9
TARGET_CARTPOLE = 0.8
TARGET_SCALING = 1.8
LOADED_CORES = 0.25
"""Background load (cores used by other processes) above which a figure is flagged."""


class SamplingPolicy(TorchPolicyGraph):
    """TorchPolicyGraph's own compute_actions, a trivial loss and NO postprocess override."""

    def loss(self, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, Any]]:
        dist_inputs, values = self.model(batch[SampleBatch.OBS])
        return 0.0 * (dist_inputs.sum() + values.sum()), {}


def cartpole_vec_creator(env_config: Mapping[str, Any]) -> gym.vector.VectorEnv:
    """Env creator returning Gymnasium's natively vectorised CartPole (NEXT_STEP autoreset)."""
    return gym.make_vec(
        "CartPole-v1",
        num_envs=int(env_config.get("num_envs", CARTPOLE_ENVS)),
        vectorization_mode="vector_entry_point",
    )


def policy_config() -> PPOConfig:
    """Config for both policies: the benchmark model, PPO's defaults otherwise."""
    return PPOConfig(model=MODEL)


# -- hand-written loops ----------------------------------------------------------------
class RawPendulum:
    """obs -> no_grad forward -> Normal sample -> clip -> venv.step, on a SyncVectorEnv."""

    def __init__(self, num_envs: int, seed: int = 0):
        self.venv = SyncVectorEnv(
            [lambda: gym.make("Pendulum-v1") for _ in range(num_envs)],
            copy=False,
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        space = self.venv.single_action_space
        self.low, self.high = space.low, space.high
        self.model = ActorCritic(self.venv.single_observation_space, space, MODEL).eval()
        self.obs, _ = self.venv.reset(seed=seed)

    def run(self, steps: int) -> int:
        obs, venv, model, low, high = self.obs, self.venv, self.model, self.low, self.high
        with torch.no_grad():
            for _ in range(steps):
                dist_inputs, _ = model(torch.as_tensor(obs))
                mean, log_std = dist_inputs.chunk(2, dim=-1)
                act = torch.distributions.Normal(mean, log_std.exp(), validate_args=False).sample()
                obs, _rew, _term, _trunc, _info = venv.step(np.clip(act.numpy(), low, high))
        self.obs = obs
        return steps * venv.num_envs


class RawCartPoleVec:
    """obs -> no_grad forward -> Categorical(logits) sample -> venv.step, natively vectorised."""

    def __init__(self, num_envs: int, seed: int = 0):
        self.venv = cartpole_vec_creator({"num_envs": num_envs})
        self.model = ActorCritic(
            self.venv.single_observation_space, self.venv.single_action_space, MODEL
        ).eval()
        self.obs, _ = self.venv.reset(seed=seed)

    def run(self, steps: int) -> int:
        obs, venv, model = self.obs, self.venv, self.model
        with torch.no_grad():
            for _ in range(steps):
                logits, _ = model(torch.as_tensor(obs))
                act = torch.distributions.Categorical(logits=logits, validate_args=False).sample()
                obs, _rew, _term, _trunc, _info = venv.step(act.numpy())
        self.obs = obs
        return steps * venv.num_envs


# -- timing ----------------------------------------------------------------------------
def alternate(
    candidates: Mapping[str, Callable[[], int]], seconds: float, rounds: int
) -> dict[str, Any]:
    """Interleave the candidates chunk by chunk; ``rounds`` rounds of ``seconds`` each.

    Within a round the candidates take turns (one chunk each, the starting candidate
    rotating), until every one has run for ``seconds``; a candidate's rate for the round is
    its actions over its own accumulated time.  Interleaving at chunk granularity (0.01-0.5
    s) lets background load hit all candidates alike.  ``best_chunk`` is each candidate's
    fastest single chunk, a second, nearly noise-free estimate.
    """
    names = list(candidates)
    rates: dict[str, list[float]] = {n: [] for n in names}
    best: dict[str, float] = {n: 0.0 for n in names}
    turn = 0
    for r in range(rounds):
        busy = {n: 0.0 for n in names}
        done = {n: 0 for n in names}
        while min(busy.values()) < seconds:
            for i in range(len(names)):
                name = names[(turn + i) % len(names)]
                t0 = time.perf_counter()
                n = candidates[name]()
                dt = time.perf_counter() - t0
                busy[name] += dt
                done[name] += n
                best[name] = max(best[name], n / dt)
            turn += 1
        for n in names:
            rates[n].append(done[n] / busy[n])
        print(
            f"    round {r + 1}/{rounds}: "
            + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in names),
            flush=True,
        )
    return {"rounds": rates, "best_chunk": best}


def evaluator_chunk(ev: PolicyEvaluator, counter: dict[str, int]) -> Callable[[], int]:
    """One ``sample()``; returns the actions taken (steps x sub-envs), counts batch rows."""
    steps = ev.rollout_fragment_length * ev.sampler.num_envs

    def chunk() -> int:
        counter["rows"] += ev.sample().count
        counter["actions"] += steps
        return steps

    return chunk


def profile_sample(ev: PolicyEvaluator, calls: int, top: int = 22) -> str:
    """cProfile ``calls`` sample() calls; the top functions by internal time, as text."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        ev.sample()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


# -- the three parts ---------------------------------------------------------------------
def in_process(
    label: str,
    raw: RawPendulum | RawCartPoleVec,
    evaluators: Mapping[str, PolicyEvaluator],
    fragment: int,
    seconds: float,
    rounds: int,
) -> dict[str, Any]:
    """Raw loop vs each evaluator, alternating; medians, ratios and rows/actions."""
    counters = {name: {"rows": 0, "actions": 0} for name in evaluators}
    candidates: dict[str, Callable[[], int]] = {"raw": lambda: raw.run(fragment)}
    for name, ev in evaluators.items():
        candidates[name] = evaluator_chunk(ev, counters[name])
    print(f"  warm-up ({label})", flush=True)
    for fn in candidates.values():
        fn()
    for c in counters.values():
        c.update(rows=0, actions=0)
    with CpuMeter({"benchmark": process_tree()}) as meter:
        res = alternate(candidates, seconds, rounds)
    print(f"    {meter.describe()}", flush=True)
    runs, best = res["rounds"], res["best_chunk"]
    med = {name: _median(v) for name, v in runs.items()}
    out: dict[str, Any] = {
        "rounds": runs,
        "median_actions_per_s": med,
        "ratio_to_raw": {name: med[name] / med["raw"] for name in evaluators},
        "round_ratios": {
            name: [e / r for e, r in zip(runs[name], runs["raw"], strict=True)]
            for name in evaluators
        },
        "best_chunk_actions_per_s": best,
        "best_chunk_ratio_to_raw": {name: best[name] / best["raw"] for name in evaluators},
        "rows_per_action": {name: c["rows"] / max(1, c["actions"]) for name, c in counters.items()},
        "cpu_cores_rounds": meter.cores,
    }
    return out


def _raw_worker(conn: Any, kind: str, num_envs: int, fragment: int) -> None:
    """A plain process running the raw loop one fragment per request (no Ray, no hierl)."""
    torch.set_num_threads(1)
    raw = RawPendulum(num_envs) if kind == "pendulum" else RawCartPoleVec(num_envs)
    raw.run(fragment)
    conn.send(os.getpid())
    while conn.recv():
        conn.send(raw.run(fragment))
    conn.close()


def process_scaling(
    kind: str, num_envs: int, fragment: int, seconds: float, rounds: int
) -> dict[str, Any]:
    """The machine's ceiling: the raw loop in 1 vs 2 plain processes, same round pattern."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_raw_worker, args=(child, kind, num_envs, fragment))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        pids = [conn.recv() for conn in pipes]

        def chunk_for(k: int) -> Callable[[], int]:
            def chunk() -> int:
                for conn in pipes[:k]:
                    conn.send(True)
                return sum(conn.recv() for conn in pipes[:k])

            return chunk

        with CpuMeter({"workers": pids, "driver": [os.getpid()]}) as rounds_meter:
            res = alternate(
                {"1 process": chunk_for(1), "2 processes": chunk_for(2)}, seconds, rounds
            )
        with CpuMeter({"workers": pids}) as meter:
            _phase_rate(chunk_for(2), min(seconds, 2.0))
        print(f"    2 processes: {meter.describe()}", flush=True)
    finally:
        for conn in pipes:
            conn.send(False)
        for proc in procs:
            proc.join(timeout=30)
    runs, best = res["rounds"], res["best_chunk"]
    med = {k: _median(v) for k, v in runs.items()}
    return {
        "rounds": runs,
        "median_actions_per_s": med,
        "scaling_2_vs_1": med["2 processes"] / med["1 process"],
        "best_chunk_scaling_2_vs_1": best["2 processes"] / best["1 process"],
        "cpu_cores_2_processes": meter.cores,
        "cpu_cores_rounds": rounds_meter.cores,
    }


def remote_scaling(
    spec: EvaluatorSpec, actions_per_sample: int, seconds: float, rounds: int
) -> dict[str, Any]:
    """Aggregate actions/s of rounds of ``ray.get([e.sample.remote() ...])``, 1 vs 2 actors.

    An in-process evaluator with the same arguments takes turns with them, so that the
    cost of running an evaluator as an actor (1 remote vs in-process) is a same-run ratio.
    """
    import ray

    remote_cls = PolicyEvaluator.as_remote(num_cpus=1)
    evs = [remote_cls.remote(spec, worker_index=i + 1, num_threads=1) for i in range(2)]
    local = PolicyEvaluator(spec, worker_index=0, num_threads=1)
    ray.get([e.ping.remote() for e in evs])
    ray.get([e.sample.remote() for e in evs])  # warm-up round (env creation, first forward)
    local.sample()

    def chunk_for(k: int) -> Callable[[], int]:
        def chunk() -> int:
            batches = ray.get([e.sample.remote() for e in evs[:k]])
            assert len(batches) == k
            return k * actions_per_sample

        return chunk

    def local_chunk() -> int:
        local.sample()
        return actions_per_sample

    actor_pids = [int(h.rsplit(":", 1)[1]) for h in ray.get([e.get_host.remote() for e in evs])]
    driver = os.getpid()
    ray_other = [p for p in process_tree() if p != driver and p not in actor_pids]
    groups = {"actors": actor_pids, "driver": [driver], "ray other": ray_other}
    with CpuMeter(groups) as rounds_meter:
        res = alternate(
            {"in-process": local_chunk, "1 remote": chunk_for(1), "2 remote": chunk_for(2)},
            seconds,
            rounds,
        )
    local.stop()
    # Where the CPU goes with 1 and with 2 actors busy: actors, driver, Ray's own processes
    # (raylet, GCS, idle workers) and the rest of the machine (background load).
    cpu: dict[str, dict[str, float]] = {}
    for k in (1, 2):
        with CpuMeter(groups) as meter:
            phase_rate = _phase_rate(chunk_for(k), seconds)
        cpu[f"{k} remote"] = {**meter.cores, "actions_per_s": phase_rate}
        print(f"    {k} remote alone: {phase_rate:,.0f}/s; {meter.describe()}", flush=True)
    for e in evs:
        ray.kill(e)
    runs, best = res["rounds"], res["best_chunk"]
    med = {k: _median(v) for k, v in runs.items()}
    return {
        "rounds": runs,
        "median_actions_per_s": med,
        "scaling_2_vs_1": med["2 remote"] / med["1 remote"],
        "round_scaling": [b / a for a, b in zip(runs["1 remote"], runs["2 remote"], strict=True)],
        "remote_vs_in_process": med["1 remote"] / med["in-process"],
        "best_chunk_actions_per_s": best,
        "best_chunk_scaling_2_vs_1": best["2 remote"] / best["1 remote"],
        "cpu_cores": cpu,
        "cpu_cores_rounds": rounds_meter.cores,
    }


def _phase_rate(chunk: Callable[[], int], seconds: float) -> float:
    done, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        done += chunk()
    return done / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (median)")
    parser.add_argument("--quick", action="store_true", help="short run: 1 s, 2 rounds")
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="cProfile evaluator.sample() (auto: only when a ratio misses its target)",
    )
    parser.add_argument("--skip-remote", action="store_true", help="in-process parts only")
    parser.add_argument("--record", action="store_true", help=RECORD_HELP)
    parser.add_argument(
        "--retry-loaded",
        type=int,
        default=0,
        metavar="N",
        help="measure a part again, up to N times, if other processes used more than "
        f"{LOADED_CORES} cores meanwhile",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each part, wait up to this long for other processes to go quiet",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = min(args.seconds, 1.0), min(args.rounds, 2)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    torch.set_num_threads(1)
    seconds, rounds = args.seconds, args.rounds
    name = "sampling_quick" if args.quick else "sampling"
    config = {
        "seconds_per_measurement": seconds,
        "rounds": rounds,
        "torch_threads": torch.get_num_threads(),
        "model": {"hiddens": list(MODEL.hiddens), "activation": MODEL.activation},
        "pendulum": {"num_envs": PENDULUM_ENVS, "rollout_fragment_length": PENDULUM_FRAGMENT},
        "cartpole_vec": {"num_envs": CARTPOLE_ENVS, "rollout_fragment_length": CARTPOLE_FRAGMENT},
    }
    figures: dict[str, Any] = {}
    profiles: dict[str, str] = {}
    cfg = policy_config()

    def measure(label: str, part: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a part; again (up to --retry-loaded times) if background load spoiled it."""
        for attempt in range(args.retry_loaded + 1):
            if args.wait_quiet:
                wait_for_quiet(args.wait_quiet)
            out = part()
            bg = out["cpu_cores_rounds"]["outside"]
            out["attempts"] = attempt + 1
            if bg <= LOADED_CORES or attempt == args.retry_loaded:
                return out
            print(f"  {label}: background load {bg:.2f} cores; measuring again", flush=True)
        raise AssertionError("unreachable")

    # a) Pendulum, SyncVectorEnv of 64 -----------------------------------------------
    print(f"a) Pendulum-v1 x{PENDULUM_ENVS} SyncVectorEnv, in process", flush=True)

    def make_ev(env: Any, policy_class: type, **kwargs: Any) -> PolicyEvaluator:
        spec = EvaluatorSpec.of(env, policy_class, cfg, seed=0, **kwargs)
        return PolicyEvaluator(spec, num_threads=1)

    def pendulum_ev(policy_class: type) -> PolicyEvaluator:
        return make_ev(
            "Pendulum-v1",
            policy_class,
            num_envs_per_evaluator=PENDULUM_ENVS,
            rollout_fragment_length=PENDULUM_FRAGMENT,
        )

    raw_p = RawPendulum(PENDULUM_ENVS)
    pend_evs = {"evaluator": pendulum_ev(SamplingPolicy), "evaluator PPO": pendulum_ev(PPOPolicy)}
    for ev in pend_evs.values():
        assert isinstance(ev.sampler.venv, type(raw_p.venv))  # hierl's SameStepVectorEnv
        assert ev.sampler.venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    figures["pendulum"] = measure(
        "pendulum",
        lambda: in_process("pendulum", raw_p, pend_evs, PENDULUM_FRAGMENT, seconds, rounds),
    )

    # c) CartPole natively vectorised (in-process part) --------------------------------
    print(f"c) CartPole-v1 make_vec x{CARTPOLE_ENVS} (vector_entry_point), in process", flush=True)

    def cartpole_ev(policy_class: type) -> PolicyEvaluator:
        return make_ev(
            cartpole_vec_creator,
            policy_class,
            env_config={"num_envs": CARTPOLE_ENVS},
            rollout_fragment_length=CARTPOLE_FRAGMENT,
        )

    raw_c = RawCartPoleVec(CARTPOLE_ENVS)
    cart_evs = {"evaluator": cartpole_ev(SamplingPolicy), "evaluator PPO": cartpole_ev(PPOPolicy)}
    for ev in cart_evs.values():
        assert type(ev.sampler.venv) is type(raw_c.venv)
    figures["cartpole_vec"] = measure(
        "cartpole_vec",
        lambda: in_process("cartpole_vec", raw_c, cart_evs, CARTPOLE_FRAGMENT, seconds, rounds),
    )

    for key, target, evs in (
        ("pendulum", TARGET_PENDULUM, pend_evs),
        ("cartpole_vec", TARGET_CARTPOLE, cart_evs),
    ):
        missed = figures[key]["ratio_to_raw"]["evaluator"] < target
        if args.profile == "always" or (args.profile == "auto" and missed):
            for ev_name, ev in evs.items():
                text = profile_sample(ev, calls=3 if args.quick else 10)
                profiles[f"{key} / {ev_name}"] = text
    for ev in (*pend_evs.values(), *cart_evs.values()):
        ev.stop()
    raw_p.venv.close()
    raw_c.venv.close()

    # b) + c) remote evaluators ----------------------------------------------------------
    if not args.skip_remote:
        for key, kind, n, frag in (
            ("pendulum", "pendulum", PENDULUM_ENVS, PENDULUM_FRAGMENT),
            ("cartpole_vec", "cartpole_vec", CARTPOLE_ENVS, CARTPOLE_FRAGMENT),
        ):
            print(f"machine ceiling: {key} raw loop in 1 vs 2 plain processes", flush=True)
            figures[f"{key}_procs"] = measure(
                f"{key} processes",
                functools.partial(process_scaling, kind, n, frag, seconds, rounds),
            )

        import ray

        if __name__ != "__main__":  # imported: ship this module's classes to the workers
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        try:
            print("b) Pendulum-v1: 1 vs 2 remote evaluators", flush=True)
            figures["pendulum_remote"] = measure(
                "pendulum remote",
                functools.partial(
                    remote_scaling,
                    EvaluatorSpec.of(
                        "Pendulum-v1",
                        SamplingPolicy,
                        cfg,
                        num_envs_per_evaluator=PENDULUM_ENVS,
                        rollout_fragment_length=PENDULUM_FRAGMENT,
                        seed=0,
                    ),
                    PENDULUM_FRAGMENT * PENDULUM_ENVS,
                    seconds,
                    rounds,
                ),
            )
            print("c) CartPole-v1 make_vec: 1 vs 2 remote evaluators", flush=True)
            figures["cartpole_vec_remote"] = measure(
                "cartpole_vec remote",
                functools.partial(
                    remote_scaling,
                    EvaluatorSpec.of(
                        cartpole_vec_creator,
                        SamplingPolicy,
                        cfg,
                        env_config={"num_envs": CARTPOLE_ENVS},
                        rollout_fragment_length=CARTPOLE_FRAGMENT,
                        seed=0,
                    ),
                    CARTPOLE_FRAGMENT * CARTPOLE_ENVS,
                    seconds,
                    rounds,
                ),
            )
        finally:
            ray.shutdown()
        for key in ("pendulum", "cartpole_vec"):
            remote, procs = figures[f"{key}_remote"], figures[f"{key}_procs"]
            remote["scaling_relative_to_process_ceiling"] = (
                remote["scaling_2_vs_1"] / procs["scaling_2_vs_1"]
            )

    # report -----------------------------------------------------------------------------
    figures["background_load_warnings"] = report(figures)
    for title, text in profiles.items():
        print(f"\ncProfile of evaluator.sample(), {title} (sorted by tottime):")
        print(text)
    figures["targets"] = {
        "pendulum_evaluator_ratio": TARGET_PENDULUM,
        "cartpole_vec_evaluator_ratio": TARGET_CARTPOLE,
        "remote_scaling_2_vs_1": TARGET_SCALING,
    }
    if profiles:
        figures["profiles"] = profiles
    path = record(name, config, figures, commit=args.record)
    pngs = write_pngs(name, figures)
    print(f"\nwrote {path}" + "".join(f"\nwrote {p}" for p in pngs))


def report(figures: Mapping[str, Any]) -> list[str]:
    """Print one table: throughput, same-run ratios and targets for every measurement."""
    rows: list[tuple[str, ...]] = []

    loaded: list[str] = []

    def verdict(value: float, target: float) -> str:
        return f">= {target:g}: {'ok' if value >= target else 'MISSED'}"

    def load(what: str, outside: float) -> str:
        """A warning mark when other processes used > LOADED_CORES cores meanwhile."""
        if outside <= LOADED_CORES:
            return ""
        loaded.append(f"{what}: {outside:.2f} cores")
        return f" [LOADED: {outside:.2f} bg cores]"

    for key, label, target in (
        ("pendulum", "Pendulum x64 SyncVectorEnv", TARGET_PENDULUM),
        ("cartpole_vec", "CartPole make_vec x1024", TARGET_CARTPOLE),
    ):
        f = figures[key]
        med, ratio, best = (
            f["median_actions_per_s"],
            f["ratio_to_raw"],
            f["best_chunk_ratio_to_raw"],
        )
        bg = load(f"{key} in-process", f["cpu_cores_rounds"]["outside"])
        rows.append((f"{label}: raw loop", f"{med['raw']:,.0f}", "1", "1", bg.strip()))
        for name, what, note in (
            ("evaluator", "evaluator (no postprocess)", verdict(ratio["evaluator"], target)),
            ("evaluator PPO", "evaluator PPOPolicy (+GAE)", "info: includes postprocessing"),
        ):
            rows.append(
                (
                    f"{label}: {what}",
                    f"{med[name]:,.0f}",
                    f"{ratio[name]:.3f}",
                    f"{best[name]:.3f}",
                    note + bg,
                )
            )
        rpa = f["rows_per_action"]["evaluator"]
        if rpa < 0.9999:
            rows.append(
                (
                    f"{label}: evaluator, batch rows/s",
                    f"{med['evaluator'] * rpa:,.0f}",
                    "",
                    "",
                    f"{rpa:.3f} rows per action (NEXT_STEP reset rows dropped)",
                )
            )
        procs = figures.get(f"{key}_procs")
        if procs:
            pmed = procs["median_actions_per_s"]
            rows.append((f"{label}: raw loop, 1 process", f"{pmed['1 process']:,.0f}", "", "", ""))
            rows.append(
                (
                    f"{label}: raw loop, 2 processes",
                    f"{pmed['2 processes']:,.0f}",
                    f"{procs['scaling_2_vs_1']:.3f}",
                    f"{procs['best_chunk_scaling_2_vs_1']:.3f}",
                    "machine ceiling for 2 vs 1 (no Ray, no hierl)"
                    + load(f"{key} processes", procs["cpu_cores_rounds"]["outside"]),
                )
            )
        remote = figures.get(f"{key}_remote")
        if remote:
            rmed = remote["median_actions_per_s"]
            bg = load(f"{key} remote", remote["cpu_cores_rounds"]["outside"])
            rows.append(
                (
                    f"{label}: 1 remote evaluator",
                    f"{rmed['1 remote']:,.0f}",
                    f"{remote['remote_vs_in_process']:.3f}",
                    "",
                    f"info: vs an in-process evaluator ({rmed['in-process']:,.0f}/s) in the "
                    "same rounds" + bg,
                )
            )
            rows.append(
                (
                    f"{label}: 2 remote evaluators",
                    f"{rmed['2 remote']:,.0f}",
                    f"{remote['scaling_2_vs_1']:.3f}",
                    f"{remote['best_chunk_scaling_2_vs_1']:.3f}",
                    verdict(remote["scaling_2_vs_1"], TARGET_SCALING)
                    + f" (2 vs 1 remote; {remote['scaling_relative_to_process_ceiling']:.2f}"
                    " of the ceiling)" + bg,
                )
            )
    header = ("measurement", "actions/s", "ratio", "best-chunk", "target")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        cells = [f"{r[0]:<{widths[0]}}"] + [
            f"{c:>{w}}" for c, w in zip(r[1:4], widths[1:4], strict=True)
        ]
        return "  ".join([*cells, r[4]]).rstrip()

    print("\nactions/s: median over rounds; ratio: of medians (same run); best-chunk: ratio of")
    print("the fastest single chunk of each (least disturbed by background load)\n")
    print(line(header))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        print(line(r))
    if loaded:
        print(
            "\nWARNING: other processes used CPU during these measurements ("
            + "; ".join(loaded)
            + f" of {os.cpu_count()}); the figures marked LOADED are unreliable, rerun on a "
            "quiet machine"
        )
    sys.stdout.flush()
    return loaded


def write_pngs(name: str, figures: Mapping[str, Any]) -> list[Any]:
    """One bar chart of actions/s per environment."""
    paths = []
    for key, title in (
        ("pendulum", f"Pendulum-v1 x{PENDULUM_ENVS} SyncVectorEnv"),
        ("cartpole_vec", f"CartPole-v1 make_vec x{CARTPOLE_ENVS}"),
    ):
        med = figures[key]["median_actions_per_s"]
        labels = ["raw loop", "evaluator", "evaluator PPO"]
        values = [med["raw"], med["evaluator"], med["evaluator PPO"]]
        remote = figures.get(f"{key}_remote")
        if remote:
            labels += ["1 remote", "2 remote"]
            values += [remote["median_actions_per_s"][k] for k in ("1 remote", "2 remote")]
        paths.append(
            bar_png(
                RESULTS_DIR / f"{name}_{key}.png",
                labels,
                values,
                f"{title}: sampling throughput\n(first 3 bars: one phase; remote bars: another)",
                "actions / s",
            )
        )
    return paths


if __name__ == "__main__":
    main()
