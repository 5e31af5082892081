"""What ``sac_update.py`` and ``td3_update.py`` share: a replayed batch of HalfCheetah's
shapes, its columns as tensors, and the paired timing of hierl's update against a
pure-torch one.

The two sides are timed in alternating rounds (``rounds`` of ``updates`` each) in one
process.  The ratio (goal >= 0.9) is the median over rounds of hierl's updates/s over the
baseline's in the round beside it (paired: a load that drifts over the run affects both
sides of a pair alike); the ratio of the two sides' median rounds is reported too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from common import record

from hierl.sample_batch import SampleBatch as SB

OBS_DIM, ACT_DIM, ROWS = 17, 6, 256
"""HalfCheetah-v5's observation and action sizes; the replayed batch's rows."""


def halfcheetah_policy(policy_class: type, config_class: type, hiddens: tuple[int, ...], seed: int):
    """A ``policy_class`` with ``config_class``'s defaults and ReLU ``hiddens`` on
    HalfCheetah-shaped spaces, its weights drawn from torch seed ``seed``."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    config = config_class.from_dict({"model": {"hiddens": list(hiddens), "activation": "relu"}})
    torch.manual_seed(seed)
    return policy_class(obs_space, act_space, config)


def replay_batch(rows: int = ROWS, seed: int = 0) -> SB:
    """A replayed batch as the replay buffer hands it over (numpy columns)."""
    rng = np.random.default_rng(seed)
    return SB(
        {
            SB.OBS: rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
            SB.NEW_OBS: rng.normal(size=(rows, OBS_DIM)).astype(np.float32),
            SB.ACTIONS: rng.uniform(-1, 1, (rows, ACT_DIM)).astype(np.float32),
            SB.REWARDS: rng.normal(size=rows).astype(np.float32),
            SB.TERMINATEDS: rng.random(rows) < 0.01,
            SB.TRUNCATEDS: np.zeros(rows, bool),
        }
    )


def tensors(batch: SB) -> tuple[torch.Tensor, ...]:
    """The baseline's inputs: ``(obs, actions, rewards, terminated, next_obs)`` as tensors
    (zero-copy)."""
    return (
        torch.from_numpy(batch[SB.OBS]),
        torch.from_numpy(batch[SB.ACTIONS]),
        torch.from_numpy(batch[SB.REWARDS]),
        torch.from_numpy(batch[SB.TERMINATEDS].astype(np.float32)),
        torch.from_numpy(batch[SB.NEW_OBS]),
    )


def timed(fn: Callable[[], Any], updates: int) -> float:
    """Calls of ``fn`` per second over ``updates`` calls."""
    start = time.perf_counter()
    for _ in range(updates):
        fn()
    return updates / (time.perf_counter() - start)


def measure_update(policy: Any, baseline: Any, updates: int, rounds: int) -> dict[str, Any]:
    """``paired_rates`` of ``policy.learn_on_replay_batch`` against ``baseline.update`` on
    the same replayed batch (the baseline's as tensors)."""
    batch = replay_batch()
    inputs = tensors(batch)
    return paired_rates(
        lambda: policy.learn_on_replay_batch(batch),
        lambda: baseline.update(*inputs),
        updates,
        rounds,
    )


def paired_rates(
    hierl_update: Callable[[], Any], torch_update: Callable[[], Any], updates: int, rounds: int
) -> dict[str, Any]:
    """Updates/s of both sides in alternating rounds, after a warm-up of each (allocator,
    Adam state); their medians and the paired ratio."""
    for fn in (hierl_update, torch_update):
        timed(fn, max(3, updates // 10))
    hierl_rates, torch_rates = [], []
    for _ in range(rounds):
        hierl_rates.append(timed(hierl_update, updates))
        torch_rates.append(timed(torch_update, updates))
    hierl, base = statistics.median(hierl_rates), statistics.median(torch_rates)
    paired = [h / t for h, t in zip(hierl_rates, torch_rates, strict=True)]
    return {
        "hierl_updates_per_s": hierl,
        "torch_updates_per_s": base,
        "ratio": statistics.median(paired),
        "ratio_of_medians": hierl / base,
        "paired_ratios": paired,
        "hierl_rounds": hierl_rates,
        "torch_rounds": torch_rates,
    }


def run_benchmark(
    name: str, what: str, measure: Callable[[int, int], dict[str, Any]], doc: str | None
) -> None:
    """The command line of an update benchmark: time ``measure(updates, rounds)`` (its
    (256, 256) networks), write the figures to ``benchmarks/results/<name>.json`` with the
    machine's load averages, and print them."""
    parser = argparse.ArgumentParser(description=(doc or what).split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=20, help="updates per timed round")
    parser.add_argument("--rounds", type=int, default=21, help="alternating rounds per side")
    parser.add_argument("--quick", action="store_true", help="10 updates x 2 rounds")
    args = parser.parse_args()
    updates, rounds = (10, 2) if args.quick else (args.updates, args.rounds)
    load_before = os.getloadavg()
    torch.manual_seed(0)
    figures = measure(updates, rounds)
    figures.update(load_before=load_before, load_after=os.getloadavg())
    config = {
        "rows": ROWS,
        "obs_dim": OBS_DIM,
        "act_dim": ACT_DIM,
        "hiddens": [256, 256],
        "updates_per_round": updates,
        "rounds": rounds,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    path = record(name, config, figures)
    print(
        f"{what}, {ROWS}-row batch, (256, 256) actor and twin critics, obs {OBS_DIM}, "
        f"act {ACT_DIM}, {torch.get_num_threads()} torch threads:\n"
        f"  hierl       {figures['hierl_updates_per_s']:8.1f} updates/s (median of {rounds})\n"
        f"  pure torch  {figures['torch_updates_per_s']:8.1f} updates/s\n"
        f"  ratio       {figures['ratio']:.3f} (median of {rounds} paired rounds; goal >= 0.9)"
        f", ratio of the medians {figures['ratio_of_medians']:.3f}\n"
        f"  load averages before {load_before}, after {figures['load_after']}\n"
        f"  written to {path}"
    )
