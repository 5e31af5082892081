"""PPO on MuJoCo with one env: hierl's wall-clock per env step against Stable-Baselines3's.

Same tuned example for both (``examples/tuned/halfcheetah-ppo.yaml`` by default: CleanRL's
settings, one env, 2048-step iterations of 10 epochs over 64-row minibatches), one torch
thread each, evaluation off, in one process: rounds of ``--iterations`` PPO iterations
alternate between the two, and the best round of each is kept, so both see the same
machine state.  hierl's time is split into sampling and learning from its own timers.
The target of the MuJoCo side-by-side (``benchmarks/learning.py --peer sb3``) is a
wall-clock of at most half of SB3's.

    python benchmarks/mujoco_ppo.py
    python benchmarks/mujoco_ppo.py examples/tuned/hopper-ppo.yaml --rounds 5

Writes ``benchmarks/results/mujoco_ppo.json``.  Needs the mujoco and bench extras.
"""

from __future__ import annotations

import argparse
import time

import torch
from common import CpuMeter, record, wait_for_quiet
from learning import make_sb3_ppo

from hierl.algorithms.registry import get_trainer_class
from hierl.tune.experiments import load_experiments


def phase_seconds(trainer) -> tuple[float, float]:
    """Total seconds the trainer's optimizer has spent sampling and learning so far."""
    timers = trainer.optimizer.timers
    return timers["sample"].total_s, timers["learn"].total_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default="examples/tuned/halfcheetah-ppo.yaml")
    parser.add_argument("--iterations", type=int, default=4, help="PPO iterations per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ((name, spec),) = load_experiments(args.file).items()
    config = {**spec.config, "env": spec.env, "seed": 0, "evaluation_interval": 0}
    steps_per_iter = int(config["train_batch_size"])
    steps = args.iterations * steps_per_iter

    trainer = get_trainer_class(spec.run)(config)
    model, _env, _eval_env = make_sb3_ppo(spec, seed=0)
    torch.set_num_threads(1)  # after both are built: one thread each
    wait_for_quiet(60)
    best = {"hierl": float("inf"), "sb3": float("inf")}
    split = {"sample": float("inf"), "learn": float("inf")}
    try:
        trainer.train()  # warm-up: imports, first allocations
        model.learn(steps_per_iter)
        for r in range(args.rounds):
            with CpuMeter() as meter:
                before = phase_seconds(trainer)
                t0 = time.perf_counter()
                for _ in range(args.iterations):
                    trainer.train()
                hierl = (time.perf_counter() - t0) / steps * 1e6
                after = phase_seconds(trainer)
                sample_s, learn_s = after[0] - before[0], after[1] - before[1]
                t0 = time.perf_counter()
                model.learn(steps, reset_num_timesteps=False)
                sb3 = (time.perf_counter() - t0) / steps * 1e6
            sample_us, learn_us = sample_s * 1e6 / steps, learn_s * 1e6 / steps
            best["hierl"], best["sb3"] = min(best["hierl"], hierl), min(best["sb3"], sb3)
            split["sample"] = min(split["sample"], sample_us)
            split["learn"] = min(split["learn"], learn_us)
            print(
                f"round {r}: hierl {hierl:6.0f} us/step (sampling {sample_us:.0f}, "
                f"learning {learn_us:.0f}), SB3 {sb3:6.0f} us/step  ({meter.describe()})"
            )
    finally:
        trainer.stop()
    ratio = best["hierl"] / best["sb3"]
    print(
        f"{spec.env}: hierl {best['hierl']:.0f} us/step (sampling {split['sample']:.0f}, "
        f"learning {split['learn']:.0f}), SB3 {best['sb3']:.0f} us/step: "
        f"{ratio:.2f}x SB3's wall-clock (target <= 0.5)"
    )
    figures = {
        "hierl_us_per_step": best["hierl"],
        "hierl_sample_us_per_step": split["sample"],
        "hierl_learn_us_per_step": split["learn"],
        "sb3_us_per_step": best["sb3"],
        "hierl_over_sb3": ratio,
    }
    path = record("mujoco_ppo", {"file": args.file, "experiment": name, **config}, figures)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
