"""Atari from pixels: hierl's image sampling and CNN learning against hand-written loops.

Three figures, each with its baseline measured in the same run (same envs, same model,
same threads):

1. **Sampling**: PPO's in-process evaluator (``num_envs`` Atari envs of the DeepMind
   pipeline, one NatureCNN actor-critic forward per vector step) against a hand-written
   loop over the same ``SyncVectorEnv`` that calls the same network and samples a
   categorical action per step.  Ratio = hierl / loop (target >= 0.8).
2. **Scaling**: 1 and 2 remote evaluators (one CPU each), steps/s of parallel
   ``sample()`` calls, as the ``local`` optimizer drives them.
3. **Learning**: PPO's SGD (``minibatch_sgd`` over a sampled batch: minibatches of
   ``sgd_minibatch_size``, ``num_sgd_iter`` epochs) against a pure-torch loop with the
   same model, loss terms, minibatch size and Adam.  Ratio = hierl / torch (target >= 0.9).
   Also the pure-torch loop with NatureCNN's conv input as channels-last memory (its
   default) against plain NCHW.

Also: sampling with separate policy and value conv torsos (``vf_share_layers: False``)
against the shared default.

    python benchmarks/atari.py                 # ALE/Pong-v5, 8 envs
    python benchmarks/atari.py --quick         # fewer steps (a smoke run)
    python benchmarks/atari.py --num-gpus 1 --skip-remote   # the policy on CUDA

Writes ``benchmarks/results/atari.json`` (``atari_gpu.json`` with ``--num-gpus``).  Needs
the atari extra (``pip install -e ".[atari]"``).
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np
import torch
from common import CpuMeter, record, wait_for_quiet

from hierl import PPOTrainer
from hierl.evaluators.env import EnvContext, resolve_env_creator
from hierl.optimizers.sgd import minibatch_sgd
from hierl.sample_batch import SampleBatch


def _vector_env(env_id: str, num_envs: int) -> gym.vector.SyncVectorEnv:
    creator = resolve_env_creator(env_id)
    return gym.vector.SyncVectorEnv(
        [lambda i=i: creator(EnvContext({}, 0, i)) for i in range(num_envs)],
        copy=False,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


def hand_loop(env_id: str, num_envs: int, steps: int, model: torch.nn.Module) -> float:
    """Vector steps/s x num_envs of the plain loop: obs -> model -> sample -> step.

    On a GPU each step's uint8 frames go to the model's device and the actions come back,
    as in CleanRL's loop."""
    device = next(model.parameters()).device
    venv = _vector_env(env_id, num_envs)
    obs, _ = venv.reset(seed=0)

    def act(obs: np.ndarray) -> np.ndarray:
        logits, _ = model(torch.from_numpy(obs).to(device))
        return torch.distributions.Categorical(logits=logits).sample().cpu().numpy()

    with torch.no_grad():
        for _ in range(20):  # warm-up
            obs, *_ = venv.step(act(obs))
        t0 = time.perf_counter()
        for _ in range(steps):
            obs, *_ = venv.step(act(obs))
        elapsed = time.perf_counter() - t0
    venv.close()
    return steps * num_envs / elapsed


def hierl_sampling(trainer: PPOTrainer, rounds: int) -> float:
    """Agent steps/s of the local evaluator's ``sample()`` (PPO's postprocessing included)."""
    ev = trainer.local_evaluator
    ev.sample()  # warm-up: env creation
    t0 = time.perf_counter()
    count = sum(ev.sample().count for _ in range(rounds))
    return count / (time.perf_counter() - t0)


def remote_sampling(config: dict, num_evaluators: int, rounds: int) -> float:
    """Agent steps/s of ``num_evaluators`` remote evaluators sampling in parallel."""
    import ray

    trainer = PPOTrainer({**config, "num_evaluators": num_evaluators})
    try:
        remotes = trainer.evaluators.remote_evaluators
        ray.get([e.sample.remote() for e in remotes], timeout=300)  # warm-up
        t0 = time.perf_counter()
        count = 0
        for _ in range(rounds):
            count += sum(
                b.count for b in ray.get([e.sample.remote() for e in remotes], timeout=300)
            )
        return count / (time.perf_counter() - t0)
    finally:
        trainer.stop()


def torch_sgd(policy, batch: SampleBatch, minibatch: int, epochs: int) -> float:
    """Rows/s of a pure-torch PPO epoch loop over the same model and batch.

    The batch is on the model's device before the clock starts, as CleanRL keeps its
    rollout storage there; hierl's ``minibatch_sgd`` moves each minibatch from host memory.
    """
    model = policy.model
    device = policy.device
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    cfg = policy.config
    columns = (SampleBatch.OBS, SampleBatch.ACTIONS, "action_logp", "advantages", "value_targets")
    obs, actions, old_logp, adv, targets = (torch.from_numpy(batch[k]).to(device) for k in columns)
    n = len(obs)
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n, device=device)
        for start in range(0, n - minibatch + 1, minibatch):
            idx = perm[start : start + minibatch]
            logits, values = model(obs[idx])
            dist = torch.distributions.Categorical(logits=logits)
            ratio = torch.exp(dist.log_prob(actions[idx]) - old_logp[idx])
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            clip = cfg.clip_param
            surrogate = torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
            vf = 0.5 * ((values - targets[idx]) ** 2).mean()
            loss = -surrogate + cfg.vf_loss_coeff * vf - cfg.entropy_coeff * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the queued kernels count
    return (n // minibatch) * minibatch * epochs / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="fewer steps (smoke run)")
    parser.add_argument("--skip-remote", action="store_true")
    parser.add_argument(
        "--num-gpus", type=int, default=0, help="1: the policy (acting and SGD) on CUDA"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps = 100 if args.quick else 400
    fragment = 128  # x 8 envs = CleanRL's 1024-row batch
    config = {
        "env": args.env,
        "num_envs_per_evaluator": args.num_envs,
        "rollout_fragment_length": fragment,
        "train_batch_size": fragment * args.num_envs,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 1 if args.quick else 4,
        "num_cpus_per_evaluator": 1,
        "lr": 2.5e-4,
        "clip_param": 0.1,
        "entropy_coeff": 0.01,
        "kl_coeff": 0.0,
        "grad_clip": 0.5,
        "seed": 0,
        "num_gpus": args.num_gpus,
    }
    wait_for_quiet(60)
    figures: dict[str, float] = {}
    trainer = PPOTrainer(config)
    try:
        policy = trainer.get_policy()
        with CpuMeter() as meter:
            loop = hand_loop(args.env, args.num_envs, steps, policy.model)
        print(f"hand-written loop     {loop:8.0f} agent steps/s   ({meter.describe()})")
        rounds = max(1, steps // fragment)
        with CpuMeter() as meter:
            ours = hierl_sampling(trainer, rounds)
        print(f"hierl local evaluator {ours:8.0f} agent steps/s   ({meter.describe()})")
        figures.update(loop_steps_per_s=loop, hierl_steps_per_s=ours, sampling_ratio=ours / loop)
        print(f"sampling ratio hierl / loop: {ours / loop:.2f}x (target >= 0.8)")
        separate = PPOTrainer({**config, "model": {"vf_share_layers": False}})
        try:  # the choice of a shared conv torso (the default for images), measured
            apart = hierl_sampling(separate, rounds)
        finally:
            separate.stop()
        figures.update(separate_torsos_steps_per_s=apart, shared_over_separate=ours / apart)
        print(
            f"separate policy/value torsos {apart:8.0f} agent steps/s: shared is "
            f"{ours / apart:.2f}x faster"
        )

        batch = trainer.local_evaluator.sample()
        epochs, minibatch = config["num_sgd_iter"], config["sgd_minibatch_size"]
        rows = (batch.count // minibatch) * minibatch * epochs

        rng = np.random.default_rng(0)

        def hierl_sgd() -> float:  # what the optimizers run: hierl.optimizers.sgd
            t0 = time.perf_counter()
            minibatch_sgd(policy, batch, epochs, minibatch, rng)
            return rows / (time.perf_counter() - t0)

        hierl_sgd(), torch_sgd(policy, batch, minibatch, epochs)  # warm-up
        # interleaved repeats, best of each: both see the same machine state
        runs = [(hierl_sgd(), torch_sgd(policy, batch, minibatch, epochs)) for _ in range(3)]
        hierl_rows, pure = max(r[0] for r in runs), max(r[1] for r in runs)
        figures.update(
            learn_rows_per_s=hierl_rows, torch_rows_per_s=pure, learn_ratio=hierl_rows / pure
        )
        print(
            f"PPO SGD: hierl {hierl_rows:.0f} rows/s, pure torch {pure:.0f} rows/s: "
            f"{hierl_rows / pure:.2f}x (target >= 0.9)"
        )
        # NatureCNN's conv input layout, measured: channels-last memory vs plain NCHW
        torso = policy.model.pi_torso
        layouts = {"channels_last": torch.channels_last, "nchw": torch.contiguous_format}
        rates = {name: 0.0 for name in layouts}
        try:
            for _ in range(3):  # interleaved, best of each
                for name, layout in layouts.items():
                    torso.memory_format = layout
                    rates[name] = max(rates[name], torch_sgd(policy, batch, minibatch, epochs))
        finally:
            del torso.memory_format  # back to the class default
        figures.update(
            nchw_rows_per_s=rates["nchw"],
            channels_last_over_nchw=rates["channels_last"] / rates["nchw"],
        )
        print(
            f"pure-torch SGD, conv input channels-last {rates['channels_last']:.0f} vs NCHW "
            f"{rates['nchw']:.0f} rows/s: {rates['channels_last'] / rates['nchw']:.2f}x"
        )
    finally:
        trainer.stop()
    if not args.skip_remote:
        for n in (1, 2):
            rate = remote_sampling(config, n, max(1, steps // fragment))
            figures[f"remote_{n}_steps_per_s"] = rate
            print(f"{n} remote evaluator(s): {rate:8.0f} agent steps/s")
        figures["scaling_1_to_2"] = (
            figures["remote_2_steps_per_s"] / figures["remote_1_steps_per_s"]
        )
        print(
            f"scaling 1 -> 2 evaluators: {figures['scaling_1_to_2']:.2f}x "
            f"(on {os.cpu_count()} cores)"
        )
    if args.num_gpus:
        figures["device"] = torch.cuda.get_device_name()
    name = "atari_gpu" if args.num_gpus else "atari"
    path = record(name, {**config, "steps": steps}, figures)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
