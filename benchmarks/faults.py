"""A component of a nested trainer killed mid-run on a real task, and the run going on.

    python benchmarks/faults.py ppo-es      # PPO-ES on Walker2d-v5, ~5 minutes on 2 cores
    python benchmarks/faults.py alphazero   # AlphaZero on Connect Four 6x7, ~5 minutes

Issue 36 asks to show once, on a real task, that a member or component lost mid-round is
recreated (the tests show it on CartPole and Tic-Tac-Toe).  Each scenario trains from a
tuned file, and ``--kill-after`` seconds into round ``--kill-round`` it sends SIGKILL to
the process of a component (a crash: the OS ends it, no Ray call is involved); the
trainer is left to notice and recover on its own.

* ``ppo-es``: ``examples/tuned/walker2d-ppo-es.yaml`` (4 PPO members, rounds of
  ``--iterations`` member iterations); member ``--member``'s actor is killed.  The dead
  member is recreated with the complete state of the best survivor and rejoins the round.
* ``alphazero``: ``examples/tuned/connect-four-alphazero-no-gate.yaml`` with iterations
  of ``--seconds``; one self-play actor and the replay actor are killed together.  Each is
  recreated in place (a recreated replay actor starts empty and refills).

Per round: wall seconds, env steps or self-play moves, the restart counters and the
returns (PPO-ES: each member's training return; AlphaZero: the replay size and the
score against pure MCTS).  Writes ``benchmarks/results/faults_<scenario>.json`` (with
``--record``, also into the committed ``benchmarks/records/``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import threading
import time
from typing import Any

from common import BENCH_DIR, record

from hierl import get_trainer_class
from hierl.tune.experiments import load_experiments

TUNED = BENCH_DIR.parent / "examples" / "tuned"
FILES = {
    "ppo-es": TUNED / "walker2d-ppo-es.yaml",
    "alphazero": TUNED / "connect-four-alphazero-no-gate.yaml",
}


def actor_pid(actor: Any) -> int:
    """The process id of a Ray actor (asked of the actor itself)."""
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def kill_later(pids: list[int], seconds: float) -> threading.Timer:
    """SIGKILL each of ``pids`` after ``seconds`` (on a timer thread, while training)."""

    def kill() -> None:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        print(f"  killed pid {', '.join(map(str, pids))}", flush=True)

    timer = threading.Timer(seconds, kill)
    timer.start()
    return timer


def load(scenario: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The scenario's algorithm and config: its tuned file's, with ``overrides``."""
    ((_, spec),) = load_experiments(str(FILES[scenario])).items()
    return spec.run, {**spec.config, "env": spec.env, **overrides}


def row_of(scenario: str, result: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What a round's result shows of the run and of its recovery."""
    row: dict[str, Any] = {"round": result["training_iteration"], "wall_s": round(wall_s, 1)}
    if scenario == "ppo-es":
        n = sum(k.startswith("population/iterations/") for k in result)
        row |= {
            "timesteps_total": result["timesteps_total"],
            "restarts": result["population/num_member_restarts"],
            "member_iterations": [result[f"population/iterations/{i}"] for i in range(n)],
            "member_returns": [
                round(result[f"population/episode_reward_mean/{i}"], 1) for i in range(n)
            ],
        }
    else:
        row |= {
            "self_play_moves": result["timesteps_total"],
            "restarts": {
                k.split("/")[1]: v for k, v in result.items() if k.startswith("actor_restarts/")
            },
            "replay_size": result["replay_size"],
            "score_vs_mcts": result["episode_reward_mean"],
        }
    return row


def victims(scenario: str, trainer: Any, member: int) -> list[int]:
    """The pids killed: member ``member``'s actor, or a self-play actor and the replay."""
    if scenario == "ppo-es":
        return [actor_pid(trainer.members[member][0])]
    return [actor_pid(trainer.self_play[0]), actor_pid(trainer.replay)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train ``args.rounds`` rounds, killing the victims in ``args.kill_round``; the
    figures (each round's row, the kill round's wall-clock and the others' median)."""
    if args.scenario == "ppo-es":
        overrides = {"max_member_iterations_per_round": args.iterations}
    else:
        overrides = {"time_budget_s": args.seconds}
    algo, config = load(args.scenario, {**overrides, "seed": args.seed})
    rows = []
    with get_trainer_class(algo)(config) as trainer:
        for r in range(1, args.rounds + 1):
            timer = None
            if r == args.kill_round:
                timer = kill_later(victims(args.scenario, trainer, args.member), args.kill_after)
            start = time.perf_counter()
            result = trainer.train()
            rows.append(row_of(args.scenario, result, time.perf_counter() - start))
            if timer is not None:
                timer.join()
            print(f"  {rows[-1]}", flush=True)
    others = [r["wall_s"] for r in rows[1:] if r["round"] != args.kill_round]
    killed = next(r for r in rows if r["round"] == args.kill_round)
    figures = {
        "rows": rows,
        "kill_round_wall_s": killed["wall_s"],
        "other_rounds_median_wall_s": statistics.median(others) if others else None,
    }
    print(
        f"round {args.kill_round} (the kill): {killed['wall_s']} s; the other rounds after "
        f"the first: median {figures['other_rounds_median_wall_s']} s",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=sorted(FILES))
    parser.add_argument("--rounds", type=int, default=4, help="training iterations (rounds)")
    parser.add_argument("--kill-round", type=int, default=2, help="the round of the kill")
    parser.add_argument("--kill-after", type=float, default=5.0, help="seconds into it")
    parser.add_argument("--member", type=int, default=1, help="ppo-es: the member killed")
    parser.add_argument(
        "--iterations", type=int, default=2, help="ppo-es: member iterations per round"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="alphazero: seconds a round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="also copy to benchmarks/records/")
    args = parser.parse_args()
    if not 1 <= args.kill_round <= args.rounds:
        parser.error(f"--kill-round {args.kill_round} is not one of rounds 1..{args.rounds}")
    figures = run(args)
    path = record(
        f"faults_{args.scenario.replace('-', '_')}",
        {**vars(args), "file": str(FILES[args.scenario].relative_to(BENCH_DIR.parent))},
        figures,
        commit=args.record,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
