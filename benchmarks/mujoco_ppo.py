"""PPO on MuJoCo with one env: hierl's wall-clock per env step against Stable-Baselines3's.

Same tuned example for both (``examples/tuned/halfcheetah-ppo.yaml`` by default: CleanRL's
settings, one env, 2048-step iterations of 10 epochs over 64-row minibatches), one torch
thread each, evaluation off, in one process: rounds of ``--iterations`` PPO iterations
alternate between the two, and the best round of each is kept, so both see the same
machine state.  hierl's time is split into sampling and learning from its own timers.
Then its SGD (``minibatch_sgd`` over one sampled batch, the optimizer's loop) is timed
per update against a bare CleanRL-style torch loop over a copy of the same model and
minibatches (``--floor-reps`` alternations, best of each): the learner's distance from
the floor that torch's per-op cost sets.
The target of the MuJoCo side-by-side (``benchmarks/learning.py --peer sb3``) is a
wall-clock of at most half of SB3's.

    python benchmarks/mujoco_ppo.py
    python benchmarks/mujoco_ppo.py examples/tuned/hopper-ppo.yaml --rounds 5

Writes ``benchmarks/results/mujoco_ppo.json``.  Needs the mujoco and bench extras.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from common import CpuMeter, record, wait_for_quiet
from learning import make_sb3_ppo

from hierl import get_trainer_class
from hierl.models.distributions import DiagGaussian
from hierl.optimizers.sgd import minibatch_sgd
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import make_adam
from hierl.tune.experiments import load_experiments


def phase_seconds(trainer) -> tuple[float, float]:
    """Total seconds the trainer's optimizer has spent sampling and learning so far."""
    timers = trainer.optimizer.timers
    return timers["sample"].total_s, timers["learn"].total_s


def torch_floor_us(policy, batch: SampleBatch, minibatch: int, epochs: int) -> float:
    """Microseconds per update of a bare torch PPO loop (CleanRL's
    ``ppo_continuous_action.py`` update: Gaussian log-density, ratio, per-minibatch
    advantage normalisation, clipped surrogate, value loss (clipped if the policy clips),
    gradient norm clipping, fused Adam) over a copy of the policy's model."""
    model = copy.deepcopy(policy.model)
    opt = make_adam(list(model.parameters()), policy.config.lr, eps=1e-5)
    cfg = policy.config
    cols = [
        torch.from_numpy(np.ascontiguousarray(batch[k]))
        for k in ("obs", "actions", "action_logp", "advantages", "value_targets", "vf_preds")
    ]
    n = batch.count
    updates = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n)
        for start in range(0, n - minibatch + 1, minibatch):
            obs, act, old_logp, adv, ret, old_v = (c[perm[start : start + minibatch]] for c in cols)
            dist_inputs, values = model(obs)
            ratio = torch.exp(DiagGaussian(dist_inputs).logp(act) - old_logp)
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            clip = cfg.clip_param
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
            vf = (values - ret) ** 2
            if cfg.vf_clip_param:
                v = old_v + (values - old_v).clamp(-cfg.vf_clip_param, cfg.vf_clip_param)
                vf = torch.max(vf, (v - ret) ** 2)
            loss = -surrogate + cfg.vf_loss_coeff * 0.5 * vf.mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            updates += 1
    return (time.perf_counter() - t0) / updates * 1e6


def learner_floor(trainer, config: dict, reps: int) -> tuple[float, float]:
    """Best microseconds per update of hierl's SGD and of :func:`torch_floor_us`."""
    policy = trainer.get_policy()
    batch = trainer.evaluators.local_evaluator.sample()  # postprocessed: advantages
    minibatch, epochs = int(config["sgd_minibatch_size"]), int(config["num_sgd_iter"])
    updates = (batch.count // minibatch) * epochs
    rng = np.random.default_rng(0)
    best_hierl = best_torch = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        stats = minibatch_sgd(policy, batch, epochs, minibatch, rng)
        assert stats["num_updates"] == updates, stats["num_updates"]
        best_hierl = min(best_hierl, (time.perf_counter() - t0) / updates * 1e6)
        best_torch = min(best_torch, torch_floor_us(policy, batch, minibatch, epochs))
    return best_hierl, best_torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default="examples/tuned/halfcheetah-ppo.yaml")
    parser.add_argument("--iterations", type=int, default=4, help="PPO iterations per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--floor-reps", type=int, default=3, help="learner-floor alternations")
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
        sgd_us, floor_us = learner_floor(trainer, config, args.floor_reps)
    finally:
        trainer.stop()
    ratio = best["hierl"] / best["sb3"]
    print(
        f"{spec.env}: hierl {best['hierl']:.0f} us/step (sampling {split['sample']:.0f}, "
        f"learning {split['learn']:.0f}), SB3 {best['sb3']:.0f} us/step: "
        f"{ratio:.2f}x SB3's wall-clock (target <= 0.5)"
    )
    print(
        f"learner: hierl {sgd_us:.0f} us per {config['sgd_minibatch_size']}-row update, a bare "
        f"torch loop {floor_us:.0f} us: {floor_us / sgd_us:.2f}x the floor's speed"
    )
    figures = {
        "hierl_us_per_step": best["hierl"],
        "hierl_sample_us_per_step": split["sample"],
        "hierl_learn_us_per_step": split["learn"],
        "sb3_us_per_step": best["sb3"],
        "hierl_over_sb3": ratio,
        "hierl_sgd_us_per_update": sgd_us,
        "torch_sgd_us_per_update": floor_us,
    }
    path = record("mujoco_ppo", {"file": args.file, "experiment": name, **config}, figures)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
