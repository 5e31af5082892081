"""IMPALA's pipeline: throughput against PPO and A3C, the learner against pure torch, and
how many workers the single-threaded driver could feed.

Three measurements, each with its baseline from the same run, printed and written to
``benchmarks/results/impala.json``:

1. **Env frames/s** of IMPALA (``aso``), PPO (``local``) and A3C (``async``) on the same
   remote evaluators (same count, sub-envs, fragment length, model), for CartPole-v1
   and an Atari-shaped image env (random ``(84, 84, 4)`` uint8 frames, NatureCNN): the
   trainers' ``timesteps_this_iter / time_this_iter_s`` after a warm-up iteration.
2. **The learner**: IMPALA's update (forward, V-trace, loss, backward, clip, Adam) on
   image train batches against a pure-torch loop over the same NatureCNN, batch size,
   loss terms and Adam.  Ratio = hierl rows/s / torch rows/s (target >= 0.85).
3. **The driver's routing capacity**: the real ``aso`` event loop over *fake*
   evaluators whose sample task returns a cached fragment at once, with a learner that
   drops each train batch.  What remains is the driver's own work per fragment: wait for
   finished tasks, fetch and concatenate fragments into train batches, relaunch sample
   tasks with fresh weights.  The fragments routed per second of driver CPU, divided by
   the fragments per second one real evaluator produces (measurement 1, for each env),
   is the number of workers one driver core could feed; the arithmetic is printed for 256.

Usage::

    .venv/bin/python benchmarks/impala.py              # all three, ~4 minutes
    .venv/bin/python benchmarks/impala.py --quick      # shorter runs (a smoke test)
    python benchmarks/impala.py --learner-only --num-gpus 1   # the learner on CUDA
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import torch

from hierl import IMPALATrainer, get_trainer_class
from hierl.optimizers.aso import ASOConfig, AsyncSamplesOptimizer
from hierl.optimizers.aso.optimizer import sample_fragment
from hierl.sample_batch import SampleBatch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CpuMeter, ImageEnv, cartpole_batch, measure_routing, process_tree, record

PAPER_WORKERS = 256


ENVS = {"CartPole-v1": "CartPole-v1", "image": ImageEnv}


def frames_per_s(algo: str, env: Any, evaluators: int, iterations: int) -> dict[str, float]:
    """Env frames/s of ``algo`` with ``evaluators`` remote evaluators (shared settings)."""
    config: dict[str, Any] = {
        "env": env,
        "num_evaluators": evaluators,
        "num_cpus_per_evaluator": 0,
        "num_envs_per_evaluator": 4,
        "rollout_fragment_length": 50,
        "train_batch_size": 400 if algo != "A3C" else 200,
    }
    if algo == "IMPALA":
        config["optimizer_config"] = {"min_step_time_s": 2.0}
    if algo == "PPO":
        config.update(num_sgd_iter=1, sgd_minibatch_size=0)  # one pass, as IMPALA
    with get_trainer_class(algo)(config) as trainer:
        trainer.train()  # warm-up
        steps, seconds = 0, 0.0
        with CpuMeter({"ours": process_tree()}) as meter:
            for _ in range(iterations):
                result = trainer.train()
                steps += result["timesteps_this_iter"]
                seconds += result["time_this_iter_s"]
    return {"frames_per_s": steps / seconds, "cores_used": meter.cores["ours"]}


def image_train_batch(rows: int, fragment: int = 50) -> SampleBatch:
    """An image train batch shaped like IMPALA's: runs of ``fragment`` steps."""
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (rows, 84, 84, 4), dtype=np.uint8)
    return SampleBatch(
        {
            SampleBatch.OBS: obs,
            SampleBatch.NEW_OBS: obs,
            SampleBatch.ACTIONS: rng.integers(0, 6, rows),
            SampleBatch.REWARDS: rng.standard_normal(rows).astype(np.float32),
            SampleBatch.TERMINATEDS: np.zeros(rows, bool),
            SampleBatch.TRUNCATEDS: np.zeros(rows, bool),
            SampleBatch.EPS_ID: np.arange(rows) // fragment,
            SampleBatch.T: np.arange(rows) % fragment,
            SampleBatch.ACTION_LOGP: np.full(rows, -np.log(6), np.float32),
        }
    )


def _rows_per_s(update: Any, rows: int, updates: int, device: torch.device) -> float:
    update()  # warm-up
    start = time.perf_counter()
    for _ in range(updates):
        update()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the queued kernels count
    return rows * updates / (time.perf_counter() - start)


def learner_ratio(
    rows: int, updates: int, num_gpus: int = 0, fragment: int = 50
) -> dict[str, float]:
    """IMPALA's ``learn_on_batch`` rows/s against pure-torch loops of the same model.

    Two baselines: an actor-critic update without V-trace (the target), and the same
    with V-trace targets from a time-major loop over each ``fragment`` (as torchbeast
    computes them; bootstrapped from the fragment's last value, with no extra forward
    pass).  With ``num_gpus`` the policy is on CUDA, and all move each train batch from
    host memory to the GPU per update (train batches arrive from the actors there).
    """
    trainer = IMPALATrainer(
        {"env": ImageEnv, "num_evaluators": 0, "train_batch_size": rows, "num_gpus": num_gpus}
    )
    try:
        policy = trainer.get_policy()
        batch = image_train_batch(rows, fragment)
        model, device, gamma = policy.model, policy.device, policy.config.gamma
        hierl_rows = _rows_per_s(
            lambda: policy.learn_on_batch(SampleBatch(batch)), rows, updates, device
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, eps=1e-5)
        obs, actions, rewards, behaviour_logp = (
            torch.from_numpy(batch[k])
            for k in (
                SampleBatch.OBS,
                SampleBatch.ACTIONS,
                SampleBatch.REWARDS,
                SampleBatch.ACTION_LOGP,
            )
        )

        def step(loss: torch.Tensor) -> None:
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 40.0)
            optimizer.step()

        def torch_update() -> None:
            logits, values = model(obs.to(device))
            dist = torch.distributions.Categorical(logits=logits)
            target = rewards.to(device)
            adv = (target - values).detach()
            step(
                -(dist.log_prob(actions.to(device)) * adv).mean()
                + 0.25 * ((values - target) ** 2).mean()
                - 0.01 * dist.entropy().mean()
            )

        def time_major(x: torch.Tensor) -> torch.Tensor:  # (rows,) -> (fragment, runs)
            return x.view(-1, fragment).T

        def torch_vtrace_update() -> None:
            logits, values = model(obs.to(device))
            dist = torch.distributions.Categorical(logits=logits)
            logp = dist.log_prob(actions.to(device))
            with torch.no_grad():
                rhos = time_major(torch.exp(logp - behaviour_logp.to(device)).clamp(max=1.0))
                v, r = time_major(values), time_major(rewards.to(device))
                deltas = rhos * (r + gamma * torch.cat([v[1:], v[-1:]]) - v)
                acc, out = torch.zeros_like(v[0]), []
                for t in range(fragment - 1, -1, -1):
                    acc = deltas[t] + gamma * rhos[t] * acc
                    out.append(acc)
                vs = v + torch.stack(out[::-1])
                pg_adv = rhos * (r + gamma * torch.cat([vs[1:], v[-1:]]) - v)
            step(
                -(logp * pg_adv.T.reshape(-1)).mean()
                + 0.25 * ((values - vs.T.reshape(-1)) ** 2).mean()
                - 0.01 * dist.entropy().mean()
            )

        torch_rows = _rows_per_s(torch_update, rows, updates, device)
        vtrace_rows = _rows_per_s(torch_vtrace_update, rows, updates, device)
    finally:
        trainer.stop()
    return {
        "hierl_rows_per_s": hierl_rows,
        "torch_rows_per_s": torch_rows,
        "torch_vtrace_rows_per_s": vtrace_rows,
    }


class FakeEvaluator:
    """Answers ``aso``'s sample tasks at once with one cached fragment."""

    def __init__(self, fragment: SampleBatch):
        self.result = (fragment, (fragment.count, 0.0))

    def apply(self, fn: Any, *args: Any) -> tuple[SampleBatch, tuple[int, float]]:
        """Stands in for ``sample_fragment``: (fragment, (rows, seconds))."""
        return self.result

    def set_weights(self, weights: Any, global_vars: Any = None) -> None:
        """Accepts (and drops) fresh weights."""

    def get_metrics(self) -> list:
        """No episodes."""
        return []


def routing_capacity(num_fake: int, fragment_rows: int, seconds: float) -> dict[str, float]:
    """Fragments per second the ``aso`` driver routes from instant fake evaluators."""
    import ray

    trainer = IMPALATrainer({"env": "CartPole-v1", "num_evaluators": 0})
    evaluators = trainer.evaluators
    fake_class = ray.remote(num_cpus=0)(FakeEvaluator)
    fragment = cartpole_batch(fragment_rows)
    fragment[SampleBatch.ACTION_LOGP] = np.zeros(fragment_rows, np.float32)
    evaluators.remote_evaluators = [fake_class.remote(fragment) for _ in range(num_fake)]
    # Started, and the task function unpickled once (that imports hierl and torch there).
    evaluators.get([e.apply.remote(sample_fragment) for e in evaluators.remote_evaluators])
    config = ASOConfig.from_dict({"train_batch_size": 10 * fragment_rows, "min_step_time_s": 1.0})
    optimizer = AsyncSamplesOptimizer(evaluators, config=config)
    optimizer.learner.learn = lambda versions, batch: ({}, None)  # drops the batch
    try:
        cap = measure_routing(optimizer, seconds, fragment_rows)
        return {
            "fragments_per_s": cap.pop("batches_per_s"),
            **cap,
        }
    finally:
        optimizer.stop()
        for actor in evaluators.remote_evaluators:
            ray.kill(actor)
        evaluators.remote_evaluators = []
        trainer.stop()


def projection(fragments_per_s: float, per_worker: float, rows: int) -> tuple[int, list[str]]:
    """Workers the driver feeds at ``fragments_per_s`` when each produces ``per_worker``
    frames/s in ``rows``-row fragments, with the arithmetic as printable lines."""
    per_worker_fragments = per_worker / rows
    workers = int(fragments_per_s // per_worker_fragments)
    needed = PAPER_WORKERS * per_worker_fragments
    return workers, [
        f"one evaluator: {per_worker:,.0f} frames/s / {rows} rows per fragment "
        f"= {per_worker_fragments:.2f} fragments/s",
        f"driver: {fragments_per_s:,.0f} / {per_worker_fragments:.2f} = {workers:,} workers",
        f"{PAPER_WORKERS} workers need {PAPER_WORKERS} x {per_worker_fragments:.2f} = "
        f"{needed:,.0f} fragments/s: the driver has {fragments_per_s / needed:.2f}x of that",
    ]


def learner_figures(args: argparse.Namespace) -> dict[str, float]:
    """Measurement 2, printed."""
    learner = learner_ratio(args.learner_rows, args.learner_updates, args.num_gpus)
    ratio = learner["hierl_rows_per_s"] / learner["torch_rows_per_s"]
    vtrace_ratio = learner["hierl_rows_per_s"] / learner["torch_vtrace_rows_per_s"]
    where = "CUDA" if args.num_gpus else "CPU"
    print(
        f"IMPALA learner on {args.learner_rows}-row image batches ({where}): hierl "
        f"{learner['hierl_rows_per_s']:,.0f} rows/s, pure torch "
        f"{learner['torch_rows_per_s']:,.0f} rows/s: {ratio:.2f}x (target >= 0.85); "
        f"pure torch with a time-major V-trace loop {learner['torch_vtrace_rows_per_s']:,.0f} "
        f"rows/s: {vtrace_ratio:.2f}x"
    )
    return {**learner, "ratio": ratio, "vtrace_ratio": vtrace_ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluators", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3, help="measured train() calls")
    parser.add_argument("--learner-rows", type=int, default=500)
    parser.add_argument("--learner-updates", type=int, default=10)
    parser.add_argument("--fake-evaluators", type=int, default=8)
    parser.add_argument("--routing-seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument(
        "--learner-only", action="store_true", help="measurement 2 alone (needs no Ray)"
    )
    parser.add_argument("--num-gpus", type=int, default=0, help="1: the learner on CUDA")
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.learner_updates, args.routing_seconds = 1, 2, 2.0

    if args.learner_only:
        figures = {"learner": learner_figures(args)}
        if args.num_gpus:
            figures["device"] = torch.cuda.get_device_name()
        print(f"wrote {record('impala_learner', vars(args), figures)}")
        return 0

    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    cores = os.cpu_count()
    figures: dict[str, Any] = {"cpu_count": cores}
    print(f"Env frames/s with {args.evaluators} remote evaluators x 4 envs, {cores} cores:")
    throughput: dict[str, dict[str, dict[str, float]]] = {}
    for env_name, env in ENVS.items():
        throughput[env_name] = {}
        for algo in ("IMPALA", "PPO", "A3C"):
            run = frames_per_s(algo, env, args.evaluators, args.iterations)
            throughput[env_name][algo] = run
            print(
                f"  {env_name:<12} {algo:<7} {run['frames_per_s']:>9,.0f} frames/s "
                f"(cores used {run['cores_used']:.2f})",
                flush=True,
            )
        impala = throughput[env_name]["IMPALA"]["frames_per_s"]
        for other in ("PPO", "A3C"):
            ratio = impala / throughput[env_name][other]["frames_per_s"]
            print(f"  {env_name:<12} IMPALA / {other}: {ratio:.2f}x")
    figures["throughput"] = throughput

    figures["learner"] = learner_figures(args)

    fragment_rows = 4 * 50
    cap = routing_capacity(args.fake_evaluators, fragment_rows, args.routing_seconds)
    per_core = cap["fragments_per_s"] / max(cap["driver_cores"], 1e-9)
    print(
        f"\nDriver routing capacity ({args.fake_evaluators} instant fake evaluators, "
        f"{fragment_rows}-row fragments, learner dropping batches):\n"
        f"  {cap['fragments_per_s']:,.0f} fragments/s ({cap['frames_per_s']:,.0f} frames/s); "
        f"driver used {cap['driver_cores']:.2f} cores, the machine {cap['machine_cores']:.2f} "
        f"(one whole driver core: {cap['fragments_per_s']:,.0f} / {cap['driver_cores']:.2f} "
        f"= {per_core:,.0f} fragments/s)"
    )
    projections = {}
    for env_name, runs in throughput.items():
        per_worker = runs["IMPALA"]["frames_per_s"] / args.evaluators
        workers, lines = projection(per_core, per_worker, fragment_rows)
        projections[env_name] = {"workers": workers, "lines": lines}
        print(f"Projection at {env_name}'s per-evaluator rate:\n  " + "\n  ".join(lines))
    figures["routing"] = {**cap, "fragments_per_driver_core_s": per_core, **projections}
    path = record("impala", vars(args), figures)
    print(f"\nwrote {path}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
