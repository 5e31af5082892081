"""Microbenchmarks of the policy optimizers (RLlib ICML 2018 §5, "microbenchmarking").

Two measurements, run by ``hierl bench optimizers`` and ``benchmarks/optimizers.py``:

1. **Strategies** (``bench_strategies``): every named optimizer drives the same
   trainer (same policy graph, env and evaluator count) for a few iterations after a
   warm-up.  Reported per optimizer: env samples/s, learner samples/s (rows used in
   updates), gradient updates/s, the per-phase times, and the bytes that passed through
   the driver per iteration (numpy payloads the driver fetched with ``ray.get``, put
   with ``ray.put`` or passed by value to actor calls: ``DriverTraffic``).
   ``replay`` and ``apex`` run the same (on-policy) graph here: the figures measure the
   system's throughput, not learning.
2. **SGD throughput** (``bench_sgd``), like the paper's Table 3: one Humanoid-sized
   PPO update (obs 376, 17 continuous actions, 256x256 networks, 32k rows, 4k
   minibatches) by ``multi_gpu`` with 1 and 2 towers and by ``allreduce`` over 2
   evaluators, against a pure-torch loop on the same shapes measured in the same run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np


def strategies() -> tuple[str, ...]:
    """Every registered strategy that trains a policy graph on samples, fresh or replayed
    (``learns_from``); not ES (episode returns) nor ``auto``, which picks among them."""
    from hierl.optimizers import get_optimizer_class, optimizer_names

    return tuple(
        name
        for name in optimizer_names()
        if get_optimizer_class(name).learns_from != "returns"
        and get_optimizer_class(name).learns_on != "varies"
    )


HUMANOID_OBS, HUMANOID_ACT = 376, 17

REPLAY_SETTINGS = {
    "train_batch_size": 256,
    "learning_starts": 1000,
    "buffer_size": 50_000,
    "num_replay_shards": 2,
    "min_step_time_s": 1.0,
}
"""``optimizer_config`` of the strategies that learn from replay, each taking those it
has: they learn on minibatch-sized replayed batches, not on the algorithm's
multi-thousand-row train batch."""

TARGETS = {"multi_gpu_1_tower_vs_pure_torch": 0.9, "async_overhead_round_trips": 2.0}
"""The issue's speed targets: at least / at most these."""


def payload_bytes(value: Any) -> int:
    """Bytes of the numpy arrays inside ``value`` (dicts, sequences, dataclasses)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, Mapping):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(payload_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


class DriverTraffic:
    """Counts array bytes entering or leaving this (driver) process through Ray.

    Inside the ``with`` block, ``ray.get`` results, ``ray.put`` arguments and the
    by-value arguments of actor method calls are measured with ``payload_bytes``.
    Object refs passed between actors cost nothing here: that is the point.
    """

    def __enter__(self) -> DriverTraffic:
        import ray
        import ray.actor

        self.bytes = 0
        self._saved = (ray.get, ray.put, ray.actor.ActorMethod._remote)
        get, put, remote = self._saved

        def counting_get(*args: Any, **kwargs: Any) -> Any:
            out = get(*args, **kwargs)
            self.bytes += payload_bytes(out)
            return out

        def counting_put(value: Any, *args: Any, **kwargs: Any) -> Any:
            self.bytes += payload_bytes(value)
            return put(value, *args, **kwargs)

        def counting_remote(method: Any, args: Any = None, kwargs: Any = None, **opts: Any) -> Any:
            self.bytes += payload_bytes(list(args or ())) + payload_bytes(dict(kwargs or {}))
            return remote(method, args, kwargs, **opts)

        ray.get, ray.put, ray.actor.ActorMethod._remote = (
            counting_get,
            counting_put,
            counting_remote,
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        import ray
        import ray.actor

        ray.get, ray.put, ray.actor.ActorMethod._remote = self._saved


def _updates(stats: Mapping[str, Any]) -> float:
    return float(stats.get("num_updates", stats.get("num_gradients_applied", 0)))


def bench_strategy(
    name: str,
    algo: str = "PG",
    env: str = "CartPole-v1",
    num_evaluators: int = 2,
    iterations: int = 5,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``algo`` with optimizer ``name`` for a warm-up + ``iterations``; figures."""
    from hierl.algorithms.registry import get_trainer_class
    from hierl.optimizers import OptimizerConfig, get_optimizer_class, optimizer_settings

    base = get_trainer_class(algo)
    names = strategies()
    # The same policy graph under every strategy, whether or not the algorithm lists it,
    # with the algorithm's default batch settings wherever a strategy has them.
    base_config = base.config_class
    defaults = base_config.optimizer_defaults.get(base_config.default_optimizer, {})
    config_class = type(
        f"Bench{base_config.__name__}",
        (base_config,),
        {
            "supported_optimizers": names,
            "optimizer_defaults": {
                n: {k: v for k, v in defaults.items() if k in optimizer_settings(n)} for n in names
            },
        },
    )
    replay = get_optimizer_class(name).learns_from == "replay"
    batch = defaults.get("train_batch_size", OptimizerConfig.train_batch_size)

    def sample_the_algorithms_batch(trainer):  # the replay batch is much smaller
        return trainer.config.fragment_for(batch)

    methods = {"rollout_fragment_length": sample_the_algorithms_batch} if replay else {}
    cls = type(f"Bench{base.__name__}", (base,), {"config_class": config_class, **methods})
    settings = {
        "env": env,
        "num_evaluators": num_evaluators,
        "num_cpus_per_evaluator": 1.0 if num_evaluators <= 1 else 0.5,
        "optimizer": name,
        "seed": 0,
        **dict(config or {}),
    }
    settings["optimizer_config"] = {
        **{k: v for k, v in REPLAY_SETTINGS.items() if replay and k in optimizer_settings(name)},
        **dict(settings.get("optimizer_config") or {}),
    }
    trainer = cls(settings)
    try:
        first = trainer.train()
        before = trainer.optimizer.stats()
        start = time.perf_counter()
        with DriverTraffic() as traffic:
            for _ in range(iterations):
                last = trainer.train()
        wall = time.perf_counter() - start
        after = trainer.optimizer.stats()
    finally:
        trainer.stop()
    sampled = last["timesteps_total"] - first["timesteps_total"]
    trained = after["num_steps_trained"] - before["num_steps_trained"]
    return {
        "optimizer": name,
        "iterations": iterations,
        "wall_s": wall,
        "env_samples_per_s": sampled / wall,
        "learner_samples_per_s": trained / wall,
        "updates_per_s": (_updates(after) - _updates(before)) / wall,
        "driver_bytes_per_iter": traffic.bytes / iterations,
        "phases_ms": {k[:-8]: v for k, v in last.items() if k.endswith("_time_ms")},
        "episode_reward_mean": last["episode_reward_mean"],
    }


def bench_strategies(names: Sequence[str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """``bench_strategy`` for each name (default: ``strategies``); a failing
    strategy is reported, not fatal."""
    rows = []
    for name in names or strategies():
        try:
            rows.append(bench_strategy(name, **kwargs))
        except Exception as e:  # report and go on: the table shows what ran
            rows.append({"optimizer": name, "error": f"{type(e).__name__}: {e}"})
    return rows


# -- SGD throughput (Table 3) ------------------------------------------------------------
class HumanoidShapedEnv(gym.Env):
    """An env with Humanoid's spaces (obs 376, 17 actions); only its spaces are used."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (HUMANOID_OBS,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (HUMANOID_ACT,), np.float32)

    def __init__(self, config: Any = None):
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, False, False, {}


def _ppo_config(**overrides: Any) -> Any:
    from hierl.algorithms.ppo import PPOConfig

    return PPOConfig.from_dict(
        {"env": "bench", "model": {"hiddens": (256, 256)}, "grad_clip": None, **overrides}
    )


def humanoid_batch(rows: int, seed: int = 0) -> Any:
    """A PPO train batch with Humanoid's shapes (actions from a fresh policy)."""
    from hierl.algorithms.ppo import PPOPolicy
    from hierl.sample_batch import SampleBatch

    env = HumanoidShapedEnv()
    policy = PPOPolicy(env.observation_space, env.action_space, _ppo_config())
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((rows, HUMANOID_OBS)).astype(np.float32)
    actions, _, extra = policy.compute_actions(obs)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.ACTIONS: actions,
            SampleBatch.ADVANTAGES: rng.standard_normal(rows).astype(np.float32),
            SampleBatch.VALUE_TARGETS: rng.standard_normal(rows).astype(np.float32),
            **extra,
        }
    )


def pure_torch_sgd(batch: Any, num_sgd_iter: int, minibatch: int) -> float:
    """Samples/s of a hand-written torch PPO update on the same shapes (the limit)."""
    import torch

    from hierl.models.networks import ActorCritic, ModelConfig
    from hierl.sample_batch import SampleBatch

    env = HumanoidShapedEnv()
    model = ActorCritic(env.observation_space, env.action_space, ModelConfig(hiddens=(256, 256)))
    opt = torch.optim.Adam(model.parameters(), lr=5e-5, eps=1e-5, fused=True)
    cols = {
        k: torch.from_numpy(np.ascontiguousarray(batch[k]))
        for k in (
            SampleBatch.OBS,
            SampleBatch.ACTIONS,
            SampleBatch.ACTION_LOGP,
            SampleBatch.ADVANTAGES,
            SampleBatch.VALUE_TARGETS,
        )
    }
    n = batch.count
    start = time.perf_counter()
    for _ in range(num_sgd_iter):
        perm = torch.randperm(n)
        for i in range(0, n, minibatch):
            idx = perm[i : i + minibatch]
            obs, act, old_logp, adv, targets = (c.index_select(0, idx) for c in cols.values())
            dist_inputs, values = model(obs)
            mean, log_std = dist_inputs.chunk(2, dim=-1)
            logp = (
                -0.5 * (((act - mean) / log_std.exp()) ** 2).sum(-1)
                - log_std.sum(-1)
                - 0.5 * HUMANOID_ACT * np.log(2 * np.pi)
            )
            ratio = torch.exp(logp - old_logp)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            surrogate = torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
            loss = -surrogate.mean() + 0.5 * 0.5 * ((values - targets) ** 2).mean()
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    return n * num_sgd_iter / (time.perf_counter() - start)


def multi_gpu_sgd(batch: Any, num_sgd_iter: int, minibatch: int, towers: int) -> float:
    """Samples/s of ``MultiDeviceLearner`` (load once + epochs) with ``towers`` towers."""
    from hierl.algorithms.ppo import PPOPolicy
    from hierl.optimizers.multi_gpu.learner import MultiDeviceLearner

    env = HumanoidShapedEnv()
    policy = PPOPolicy(env.observation_space, env.action_space, _ppo_config(lr=5e-5))
    learner = MultiDeviceLearner(policy, num_towers=towers)
    try:
        start = time.perf_counter()
        rows = learner.load(batch)
        learner.optimize(num_sgd_iter, minibatch, np.random.default_rng(0))
        return rows * num_sgd_iter / (time.perf_counter() - start)
    finally:
        learner.close()


def allreduce_sgd(batch: Any, num_sgd_iter: int, minibatch: int, world: int) -> float:
    """Samples/s of ``world`` evaluators each learning on its share, gradients allreduced."""
    import ray

    from hierl.algorithms.ppo import PPOPolicy
    from hierl.evaluators import EvaluatorSpec, PolicyEvaluator
    from hierl.evaluators.ray_runtime import ensure_ray
    from hierl.optimizers.allreduce.rank import disband_group, form_group, learn_on_shard

    ensure_ray()
    cls = PolicyEvaluator.as_remote(num_cpus=min(1.0, 2.0 / world))
    spec = EvaluatorSpec(HumanoidShapedEnv, PPOPolicy, _ppo_config(lr=5e-5), seed=0)
    actors = [cls.remote(spec, worker_index=i + 1) for i in range(world)]
    try:
        form_group(actors)
        share = batch.count // world
        shards = [ray.put(batch.slice(i * share, (i + 1) * share)) for i in range(world)]
        warm = [
            a.apply.remote(learn_on_shard, s, 1, minibatch // world, 0)
            for a, s in zip(actors, shards, strict=True)
        ]
        ray.get(warm, timeout=600)  # first call: page-in, thread pools, gloo buffers
        start = time.perf_counter()
        refs = [
            a.apply.remote(learn_on_shard, s, num_sgd_iter, minibatch // world, 0)
            for a, s in zip(actors, shards, strict=True)
        ]
        ray.get(refs, timeout=600)
        return share * world * num_sgd_iter / (time.perf_counter() - start)
    finally:
        disband_group(actors)
        for a in actors:
            ray.kill(a)


def bench_sgd(
    rows: int = 32_768, minibatch: int = 4_096, num_sgd_iter: int = 2, repeats: int = 3
) -> dict[str, Any]:
    """Table 3: samples/s of each SGD strategy and of the pure-torch limit (median)."""
    import torch

    torch.set_num_threads(1)
    batch = humanoid_batch(rows)
    runs: dict[str, list[float]] = {
        "pure torch (1 thread)": [],
        "multi_gpu, 1 CPU tower": [],
        "multi_gpu, 2 CPU towers": [],
        "allreduce, 2 evaluators": [],
    }
    for _ in range(repeats):  # interleaved, so background load hits all alike
        runs["pure torch (1 thread)"].append(pure_torch_sgd(batch, num_sgd_iter, minibatch))
        runs["multi_gpu, 1 CPU tower"].append(multi_gpu_sgd(batch, num_sgd_iter, minibatch, 1))
        runs["multi_gpu, 2 CPU towers"].append(multi_gpu_sgd(batch, num_sgd_iter, minibatch, 2))
    runs["allreduce, 2 evaluators"] = [
        allreduce_sgd(batch, num_sgd_iter, minibatch, 2) for _ in range(max(1, repeats // 2))
    ]
    median = {k: float(np.median(v)) for k, v in runs.items()}
    limit = median["pure torch (1 thread)"]
    return {
        "rows": rows,
        "minibatch": minibatch,
        "num_sgd_iter": num_sgd_iter,
        "samples_per_s": median,
        "all_runs": runs,
        "ratio_to_pure_torch": {k: v / limit for k, v in median.items()},
    }


def actor_round_trip_ms(calls: int = 200) -> float:
    """Median time of one no-op actor method call (``ray.get`` of ``ping``)."""
    import ray

    from hierl.evaluators.ray_runtime import ensure_ray

    ensure_ray()

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self) -> int:
            return 0

    echo = Echo.remote()
    ray.get(echo.ping.remote(), timeout=60)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        ray.get(echo.ping.remote(), timeout=60)
        times.append(time.perf_counter() - t)
    ray.kill(echo)
    return 1000 * float(np.median(times))


def async_overhead(env: str = "CartPole-v1", gradients: int = 200) -> dict[str, float]:
    """Driver-side cost per gradient of ``async`` with one evaluator, vs an actor round trip.

    Per applied gradient: wall time minus the evaluator's own sampling and gradient
    time (both measured inside it) = what the strategy adds (scheduling, transfer,
    applying, the weight push).  The target is at most two actor round trips.
    """
    from hierl.algorithms.pg import PGTrainer
    from hierl.optimizers import AsyncGradientsOptimizer

    config = {
        "env": env,
        "num_evaluators": 1,
        "optimizer": AsyncGradientsOptimizer.name,
        "optimizer_config": {"grads_per_step": gradients},
        "num_envs_per_evaluator": 1,
        "rollout_fragment_length": 8,
        "model": {"hiddens": (32,)},
        "seed": 0,
    }
    with PGTrainer(config) as trainer:
        trainer.train()  # warm-up: actor start, first weights
        start = time.perf_counter()
        result = trainer.train()
        wall = time.perf_counter() - start
    per_gradient_ms = 1000 * wall / gradients
    compute_ms = result["sample_time_ms"] + result["grad_time_ms"]
    round_trip = actor_round_trip_ms()
    return {
        "per_gradient_ms": per_gradient_ms,
        "evaluator_compute_ms": compute_ms,
        "overhead_ms": per_gradient_ms - compute_ms,
        "actor_round_trip_ms": round_trip,
        "overhead_in_round_trips": (per_gradient_ms - compute_ms) / round_trip,
    }


def _print_strategies(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'optimizer':<11} {'env samples/s':>13} {'learner smp/s':>13} {'updates/s':>9} "
        f"{'driver KB/it':>12}  phases (ms)"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['optimizer']:<11} failed: {r['error']}")
            continue
        phases = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["phases_ms"].items()))
        print(
            f"{r['optimizer']:<11} {r['env_samples_per_s']:>13,.0f} "
            f"{r['learner_samples_per_s']:>13,.0f} {r['updates_per_s']:>9,.1f} "
            f"{r['driver_bytes_per_iter'] / 1024:>12,.1f}  {phases}"
        )


def main(argv: Sequence[str] | None = None, parser_class: type | None = None) -> int:
    """``hierl bench optimizers``: the strategy table, Table 3 and the async overhead.

    ``parser_class`` replaces ``argparse.ArgumentParser`` (the CLI's reports errors in
    one line).
    """
    import argparse

    from hierl.bench.options import add_arguments

    parser = (parser_class or argparse.ArgumentParser)(
        prog="hierl bench optimizers", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)


def _check_algo_and_env(algo: str, env: str, parser: Any) -> None:
    """``parser.error`` for an unknown ``--algo`` or ``--env``, before any strategy runs
    (each would fail the same way)."""
    from hierl.algorithms.registry import get_trainer_class
    from hierl.config import ConfigError
    from hierl.evaluators.env import resolve_env_creator

    try:
        get_trainer_class(algo)
    except ConfigError as e:
        parser.error(f"--algo: {e}")
    try:
        resolve_env_creator(env)
    except ConfigError as e:
        parser.error(f"--env: {e}")


def run(args: Any, parser: Any) -> int:
    """Run the benchmark with parsed options (``hierl.bench.options``);
    ``parser.error`` reports an unknown strategy name."""
    from pathlib import Path

    from hierl.bench.options import option_values
    from hierl.bench.report import bar_png, write_record

    valid = strategies()
    if args.optimizers is None:
        args.optimizers = list(valid)
    unknown = [n for n in args.optimizers if n not in valid]
    if unknown:
        parser.error(f"--optimizers: unknown strategy {unknown[0]!r}; valid: {', '.join(valid)}")
    _check_algo_and_env(args.algo, args.env, parser)
    out_dir = Path(args.output_dir)

    print(f"== strategies: {args.algo} on {args.env}, {args.evaluators} evaluators ==")
    rows = bench_strategies(
        args.optimizers,
        algo=args.algo,
        env=args.env,
        num_evaluators=args.evaluators,
        iterations=args.iterations,
    )
    _print_strategies(rows)
    figures: dict[str, Any] = {"strategies": rows}
    ok = [r for r in rows if "error" not in r]
    if ok:
        bar_png(
            out_dir / "optimizers_learner_throughput.png",
            [r["optimizer"] for r in ok],
            [r["learner_samples_per_s"] for r in ok],
            f"{args.algo} on {args.env}, {args.evaluators} evaluators",
            "learner samples/s",
        )
    if not args.skip_async:
        print("== async: driver overhead per gradient (1 evaluator) ==")
        figures["async_overhead"] = o = async_overhead(args.env)
        target = TARGETS["async_overhead_round_trips"]
        o["target_met"] = o["overhead_in_round_trips"] <= target
        print(
            f"per gradient {o['per_gradient_ms']:.2f} ms, evaluator compute "
            f"{o['evaluator_compute_ms']:.2f} ms, overhead {o['overhead_ms']:.2f} ms = "
            f"{o['overhead_in_round_trips']:.2f} actor round trips "
            f"({o['actor_round_trip_ms']:.2f} ms each; target <= {target:g}: "
            f"{'met' if o['target_met'] else 'MISSED'})"
        )
    if not args.skip_sgd:
        rows_, repeats = (8_192, 1) if args.quick else (32_768, 3)
        print(f"== SGD throughput, Humanoid-sized PPO ({rows_} rows, 4k minibatches) ==")
        figures["sgd"] = sgd = bench_sgd(rows=rows_, repeats=repeats)
        for name, value in sgd["samples_per_s"].items():
            ratio = sgd["ratio_to_pure_torch"][name]
            print(f"{name:<26} {value:>10,.0f} samples/s  {ratio:5.2f} x pure torch")
        target = TARGETS["multi_gpu_1_tower_vs_pure_torch"]
        sgd["target_met"] = sgd["ratio_to_pure_torch"]["multi_gpu, 1 CPU tower"] >= target
        print(f"target: multi_gpu, 1 tower >= {target:g} x pure torch: ", end="")
        print("met" if sgd["target_met"] else "MISSED")
        bar_png(
            out_dir / "sgd_throughput.png",
            list(sgd["samples_per_s"]),
            list(sgd["samples_per_s"].values()),
            "Humanoid-sized PPO update (Table 3 shapes)",
            "samples/s",
        )
    config = option_values(args)
    path = write_record(out_dir, "optimizers", config, figures)
    print(f"results: {path}")
    return 0
