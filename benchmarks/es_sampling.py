"""ES's env steps/s against a raw MuJoCo stepping loop, same process, same run.

    python benchmarks/es_sampling.py                       # Hopper-v5, linear policy, ~1 min CPU
    python benchmarks/es_sampling.py --env HalfCheetah-v5 --rounds 7
    python benchmarks/es_sampling.py --hiddens 64 64       # the MLP policy

Both sides run in this one process (``num_evaluators: 0``: ES is embarrassingly parallel,
so one core's throughput is what every evaluator adds), taking turns chunk by chunk:

* **ES**: one ``ESTrainer.train()`` iteration (antithetic perturbed episodes through the
  evaluator's episode player, observation filter, the update and the filter merge: all
  that ES does per env step);
* **raw**: ``gymnasium.make(env)``, the same linear (or MLP) policy in numpy, observations
  normalised by a fixed mean/std, actions clipped, ``env.step``, ``env.reset`` at the end
  of each episode: the loop a user writes by hand.  It plays the same number of steps as
  the ES chunk before it, with ES's current weights (similar episode lengths).

The figure is env steps per CPU second of this process (``time.process_time``), the median
over ``--rounds`` rounds; per CPU second because the shared 2-core machine gives this
process a varying share of a core, which would bias a wall-clock ratio towards whichever
side ran in a quieter moment.  Wall-clock steps/s are printed beside it.  Goal: ES / raw
>= 0.9.  With ``--profile`` the ES chunks also run under cProfile (top functions printed).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import gymnasium as gym
import numpy as np
from common import record

from hierl.algorithms.es import ESTrainer

GOAL = 0.9
"""ES / raw steps per CPU second."""


def raw_steps(env: gym.Env, layers: list[tuple[np.ndarray, np.ndarray]], mean, std, n: int):
    """Play ``n`` env steps with the numpy policy ``layers`` (tanh between layers)."""
    low, high = env.action_space.low, env.action_space.high
    obs, _ = env.reset()
    for _ in range(n):
        x = (obs - mean) / std
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < len(layers) - 1:
                x = np.tanh(x)
        obs, _, terminated, truncated, _ = env.step(np.clip(x, low, high))
        if terminated or truncated:
            obs, _ = env.reset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--hiddens", type=int, nargs="*", default=[], help="[]: linear")
    parser.add_argument("--episodes", type=int, default=16, help="ES episodes per chunk")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the ES chunks")
    args = parser.parse_args()

    config = {
        "env": args.env,
        "num_evaluators": 0,
        "model": {"hiddens": args.hiddens, "activation": "tanh"},
        "episodes_per_batch": args.episodes,
        "eval_prob": 0.0,
        "noise_stdev": 0.02,
        "seed": 0,
    }
    trainer = ESTrainer(config)
    env = gym.make(args.env)
    figures: dict[str, list[float]] = {k: [] for k in ("es", "raw", "es_wall", "raw_wall")}
    profiler = cProfile.Profile() if args.profile else None
    trainer.train()  # warm-up: env creation, first filter statistics
    for r in range(args.rounds):
        steps0 = trainer.optimizer.num_steps_sampled
        c0, w0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        trainer.train()
        if profiler:
            profiler.disable()
        c1, w1 = time.process_time(), time.perf_counter()
        n = trainer.optimizer.num_steps_sampled - steps0
        policy = trainer.get_policy()
        policy.forward(np.zeros((1, policy.in_size), np.float32))  # refresh numpy layers
        layers = [(w.astype(np.float64), b.astype(np.float64)) for w, b in policy._layers]
        rs = trainer.local_evaluator.filters["default_policy"].rs
        mean, std = np.asarray(rs.mean), np.asarray(rs.std) + 1e-8
        raw_steps(env, layers, mean, std, n)
        c2, w2 = time.process_time(), time.perf_counter()
        figures["es"].append(n / (c1 - c0))
        figures["raw"].append(n / (c2 - c1))
        figures["es_wall"].append(n / (w1 - w0))
        figures["raw_wall"].append(n / (w2 - w1))
        print(
            f"round {r}: {n:>6} steps  ES {figures['es'][-1]:8.0f}/CPU s "
            f"({figures['es_wall'][-1]:8.0f}/s wall)  raw {figures['raw'][-1]:8.0f}/CPU s "
            f"({figures['raw_wall'][-1]:8.0f}/s wall)",
            flush=True,
        )
    trainer.stop()
    env.close()
    med = {k: statistics.median(v) for k, v in figures.items()}
    ratio = med["es"] / med["raw"]
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(
        f"{args.env} {args.hiddens or 'linear'}: ES {med['es']:.0f} steps/CPU s, raw "
        f"{med['raw']:.0f} steps/CPU s: ratio {ratio:.2f} (goal >= {GOAL}: {verdict}); "
        f"wall-clock ratio {med['es_wall'] / med['raw_wall']:.2f}"
    )
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    record(
        f"es_sampling_{args.env}",
        vars(args),
        {"median": med, "ratio": ratio, "goal": GOAL, "rounds": figures},
    )


if __name__ == "__main__":
    main()
