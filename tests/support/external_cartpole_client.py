"""An app that owns its CartPole loop and plays it through a PolicyClient (run as a
separate process by tests/test_external_env.py).

    python tests/support/external_cartpole_client.py URL MODE THREADS SEED

Each of THREADS threads plays episodes until the server stops answering, then the
process exits 0 (3 if remote mode loaded Ray or torch: the client must not need them).
"""

from __future__ import annotations

import sys
import threading

import gymnasium as gym

from hierl.serve.client import PolicyClient, PolicyClientError


def play(client: PolicyClient, seed: int) -> None:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    try:
        while True:
            episode = client.start_episode()
            while True:
                action = client.get_action(episode, obs)
                obs, reward, terminated, truncated, _ = env.step(action)
                client.log_returns(episode, reward)
                if terminated or truncated:
                    client.end_episode(episode, obs, truncated=truncated and not terminated)
                    obs, _ = env.reset()
                    break
    except PolicyClientError as e:
        if e.status is not None:  # an answer, not the server going away: a bug
            print(f"client error: {e}", file=sys.stderr, flush=True)
            raise


def main() -> int:
    url, mode, threads, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    clients = [
        PolicyClient(url, inference_mode=mode, update_interval_s=1.0, timeout_s=60)
        for _ in range(threads)
    ]
    workers = [
        threading.Thread(target=play, args=(c, seed * 100 + i), daemon=True)
        for i, c in enumerate(clients)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if mode == "remote" and ({"ray", "torch"} & set(sys.modules)):
        print(f"remote client loaded {sorted({'ray', 'torch'} & set(sys.modules))}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
