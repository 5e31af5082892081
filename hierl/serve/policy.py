"""The served policy: a checkpoint's policies acting on batches of JSON requests.

``ServedPolicy`` is what each Serve replica holds (``hierl.serve.deployment``), and
it runs without Serve too (the benchmark's in-process baseline, unit tests).  It takes
the trainer's own local evaluator, so observations go through the preprocessors and
observation filters of training (``update=False``: serving never changes the filter),
and acts on a whole batch of requests with one forward pass per ``(policy, explore)``
group (``hierl.evaluators.rollout_core.act``).

Requests (``POST /act``), as JSON:

    {"observations": [[...], ...],      # or "observation": [...] for a single one
     "explore": false,                  # sample (true) or the greedy action (default)
     "extras": ["value", "action_logp"],  # per-row policy outputs to return
     "state": [...],                    # recurrent policies: the state_out of the last
                                        # answer (a list of arrays; rows per observation)
     "policy_id": "default_policy"}     # multi-agent checkpoints

Answers: ``{"actions": [...], "version": {"iteration": i, "hash": h}, "value": [...],
"state_out": [...]}`` (``"action"``, unbatched extras and state for a single
observation).  ``version`` names the weights that computed every row of the answer.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hierl.algorithms.serving import PolicySnapshot
from hierl.algorithms.trainer import Trainer
from hierl.algorithms.trainer_base import BaseTrainer
from hierl.evaluators.rollout_core import act, batch_obs
from hierl.evaluators.wire import (
    MAX_BATCH,
    WireError,
    decode_observations,
    describe_space,
    encode,
    short_repr,
    space_to_json,
)
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch

EXTRA_ALIASES = {"value": SampleBatch.VF_PREDS}
"""Wire names of policy outputs that differ from their SampleBatch column."""
REQUEST_FIELDS = ("observations", "observation", "explore", "extras", "state", "policy_id")
"""The keys a ``/act`` request may hold."""


@dataclasses.dataclass
class Query:
    """One decoded ``/act`` request."""

    policy_id: str
    obs: np.ndarray
    """Raw observations in Gymnasium's batched layout, ``(n, *shape)``."""
    state: list[np.ndarray]
    """Recurrent state, one ``(n, *shape)`` array per state tensor (``[]``: feed-forward)."""
    explore: bool
    extras: tuple[str, ...]
    """Wire names of the policy outputs to return."""
    single: bool
    """Sent as ``"observation"``: answer with unbatched values."""

    @property
    def count(self) -> int:
        """Observations in this request."""
        return len(self.obs)


def _state_space(initial: np.ndarray) -> gym.spaces.Box:
    return gym.spaces.Box(-np.inf, np.inf, np.shape(initial), np.float32)


class ServedPolicy:
    """A trainer's policies answering ``/act`` queries, with weights that can be swapped.

    Args:
        trainer: a trainer (normally rebuilt from a checkpoint with
            ``from_checkpoint``) whose local evaluator acts.
        max_observations: observations one request may carry.
        checkpoint: where the trainer came from (reported by ``spec``).
    """

    def __init__(self, trainer: Trainer, max_observations: int = MAX_BATCH, checkpoint: str = ""):
        self.trainer = trainer
        self.evaluator = trainer.local_evaluator
        self.max_observations = int(max_observations)
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._extras = {pid: self._probe_extras(pid) for pid in self.evaluator.policy_map}
        self.version: dict[str, Any] = PolicySnapshot.of(trainer).version
        """The weights answering now: ``{"iteration": ..., "hash": ...}``."""
        self.loaded_version = dict(self.version)
        """The checkpoint's own version."""

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str | Path,
        max_observations: int = MAX_BATCH,
        allow_imports: Collection[str] = (),
    ) -> ServedPolicy:
        """Rebuild the trainer that acts for the checkpoint in this process
        (``BaseTrainer.for_acting``: no remote evaluators; PPO-ES / A3C-ES: the best
        member) and serve its policies.  The run's ``input`` and ``output`` are left
        closed: serving samples nothing and writes nothing.

        Raises:
            CheckpointError: the checkpoint is missing, corrupt, does not fit its algorithm,
                or is of a nested algorithm that holds no single flat policy, or its config
                names a module outside ``allow_imports`` (see
                ``hierl.algorithms.checkpoint_imports``).
        """
        path = Path(checkpoint)
        # CRUCIAL: a replica acts but never samples: it must not open the run's input
        # (with "external", every replica would bind the same port; logged files need not
        # exist where replicas run) nor write output (ACTING_OVERRIDES, in for_acting).
        trainer = BaseTrainer.for_acting(path, allow_imports=allow_imports)
        return cls(trainer, max_observations, checkpoint=str(path))

    def _probe_extras(self, policy_id: str) -> tuple[str, ...]:
        """The wire names of the per-row outputs policy ``policy_id`` computes."""
        policy = self.evaluator.policy_map[policy_id]
        space = policy.observation_space
        flat = self.evaluator.preprocessors[policy_id].transform(batch_obs(space, [space.sample()]))
        state = [np.asarray(s)[None] for s in policy.get_initial_state()]
        extra = act(policy, flat, policy.action_space, state, explore=False).extra
        aliases = {column: name for name, column in EXTRA_ALIASES.items()}
        return tuple(sorted(aliases.get(k, k) for k in extra))

    # -- what is served --------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        """``GET /spec``: every policy's spaces, recurrent state shapes and extras; the
        checkpoint's algorithm, iteration and content hash; the version answering now."""
        policies = {}
        for pid, policy in self.evaluator.policy_map.items():
            policies[pid] = {
                "observation_space": space_to_json(policy.observation_space),
                "action_space": space_to_json(policy.action_space),
                "state_shapes": [list(np.shape(s)) for s in policy.get_initial_state()],
                "extras": list(self._extras[pid]),
            }
        out: dict[str, Any] = {
            "algorithm": self.trainer.name,
            # its name only: the path would tell every client about the server's disk
            "checkpoint": Path(self.checkpoint).name,
            "iteration": self.loaded_version["iteration"],
            "hash": self.loaded_version["hash"],
            "version": self.version,
            "observation_filter": self.trainer.config.observation_filter,
            "max_observations": self.max_observations,
            "policies": policies,
        }
        if DEFAULT_POLICY_ID in policies:  # single-agent: the spaces at the top level too
            out["observation_space"] = policies[DEFAULT_POLICY_ID]["observation_space"]
            out["action_space"] = policies[DEFAULT_POLICY_ID]["action_space"]
        return out

    # -- requests --------------------------------------------------------------------------
    def parse(self, data: Any) -> Query:
        """A ``/act`` request's JSON value as a ``Query``.

        Raises:
            WireError: naming the field that does not fit and what was expected (the
                observation shape, the state shapes, the known extras and policy ids).
        """
        if not isinstance(data, Mapping):
            raise WireError("body", f"expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise WireError(unknown[0], f"unknown field; valid: {', '.join(REQUEST_FIELDS)}")
        pid = data.get("policy_id", DEFAULT_POLICY_ID)
        if not isinstance(pid, str) or pid not in self.evaluator.policy_map:
            raise WireError(
                "policy_id",
                f"unknown policy {short_repr(pid)}; valid: {sorted(self.evaluator.policy_map)}",
            )
        policy = self.evaluator.policy_map[pid]
        if ("observations" in data) == ("observation" in data):
            raise WireError(
                "observations",
                "send either 'observations' (a list of observations of "
                f"{describe_space(policy.observation_space)}) or 'observation' (one)",
            )
        single = "observation" in data
        if single:
            obs = decode_observations(
                [data["observation"]], policy.observation_space, field="observation"
            )
        else:
            obs = decode_observations(
                data["observations"], policy.observation_space, max_batch=self.max_observations
            )
        explore = data.get("explore", False)
        if not isinstance(explore, bool):
            raise WireError("explore", f"must be true or false, got {short_repr(explore)}")
        extras = data.get("extras", [])
        known = self._extras[pid]
        if not isinstance(extras, list) or not all(isinstance(e, str) for e in extras):
            raise WireError("extras", f"must be a list of names from {list(known)}")
        for name in extras:
            if name not in known:
                raise WireError(
                    "extras", f"unknown output {short_repr(name)}; valid: {list(known)}"
                )
        state = self._parse_state(policy, data.get("state"), len(obs), single)
        return Query(pid, obs, state, explore, tuple(extras), single)

    def _parse_state(
        self, policy: PolicyGraph, value: Any, n: int, single: bool
    ) -> list[np.ndarray]:
        initial = policy.get_initial_state()
        if value is None:
            return [np.repeat(np.asarray(s, np.float32)[None], n, axis=0) for s in initial]
        shapes = [list(np.shape(s)) for s in initial]
        if not initial:
            raise WireError("state", "this policy is feed-forward: it takes no state")
        if not isinstance(value, list) or len(value) != len(initial):
            raise WireError(
                "state",
                f"expected a list of {len(initial)} arrays of shapes {shapes}"
                + ("" if single else " (one row per observation)")
                + " (the 'state_out' of the previous answer)",
            )
        state = []
        for i, (s, v) in enumerate(zip(initial, value, strict=True)):
            rows = [v] if single else v
            if not single and isinstance(v, list) and len(v) != n:
                raise WireError(f"state[{i}]", f"{len(v)} rows for {n} observations")
            state.append(
                decode_observations(
                    rows, _state_space(s), field=f"state[{i}]", max_batch=self.max_observations
                )
            )
        return state

    # -- acting ----------------------------------------------------------------------------
    def act(self, queries: Sequence[Query]) -> list[dict[str, Any]]:
        """The JSON answers to ``queries`` (a dynamic batch), in order.

        Queries of one policy and ``explore`` setting share one forward pass; all of them
        see the same weights and filters (a swap waits for the batch to finish).
        """
        groups: dict[tuple[str, bool], list[int]] = {}
        for i, q in enumerate(queries):
            groups.setdefault((q.policy_id, q.explore), []).append(i)
        answers: list[dict[str, Any]] = [{} for _ in queries]
        with self._lock:
            version = self.version
            results = [
                (idx, self._forward(pid, explore, [queries[i] for i in idx]))
                for (pid, explore), idx in groups.items()
            ]
        for idx, (env_actions, state_out, extra) in results:
            start = 0
            for i in idx:
                q = queries[i]
                rows = slice(start, start + q.count)
                start += q.count
                answers[i] = self._answer(
                    q,
                    env_actions[rows],
                    [s[rows] for s in state_out],
                    {k: v[rows] for k, v in extra.items()},
                    version,
                )
        return answers

    def _forward(
        self, policy_id: str, explore: bool, queries: list[Query]
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        policy = self.evaluator.policy_map[policy_id]
        obs = np.concatenate([q.obs for q in queries])
        flat = self.evaluator.preprocessors[policy_id].transform(obs)
        # CRUCIAL: update=False: serving normalises with the training statistics and
        # never changes them.
        flat = self.evaluator.filters[policy_id](flat, update=False)
        state = [
            np.concatenate([q.state[j] for q in queries]) for j in range(len(queries[0].state))
        ]
        out = act(policy, flat, policy.action_space, state, explore=explore)
        extra = {name: out.extra[EXTRA_ALIASES.get(name, name)] for name in self._extras[policy_id]}
        return np.asarray(out.env_actions), [np.asarray(s) for s in out.state_out], extra

    @staticmethod
    def _answer(
        q: Query,
        actions: np.ndarray,
        state_out: list[np.ndarray],
        extra: dict[str, np.ndarray],
        version: dict[str, Any],
    ) -> dict[str, Any]:
        if q.single:
            out: dict[str, Any] = {"action": encode(actions[0])}
            out.update({name: encode(extra[name][0]) for name in q.extras})
            if state_out:
                out["state_out"] = [encode(s[0]) for s in state_out]
        else:
            out = {"actions": encode(actions)}
            out.update({name: encode(extra[name]) for name in q.extras})
            if state_out:
                out["state_out"] = [encode(s) for s in state_out]
        out["version"] = version
        return out

    # -- hot swap --------------------------------------------------------------------------
    def update(self, snapshot: PolicySnapshot) -> dict[str, Any]:
        """Swap in a trainer's pushed policies (weights and filters) between two batches;
        returns the new version.  A snapshot that does not fit leaves the old policies
        answering, whole.

        Raises:
            ValueError: the snapshot names unknown policies or has weights of other shapes.
        """
        version = snapshot.version  # hashed outside the lock
        unknown = sorted(set(snapshot.weights) - set(self.evaluator.policy_map))
        if unknown:
            raise ValueError(
                f"pushed policies {unknown} are not served; served: "
                f"{sorted(self.evaluator.policy_map)}"
            )
        with self._lock:
            old_weights = self.evaluator.get_weights()
            old_filters = self.evaluator.get_filters(flush_after=False)
            try:
                self.evaluator.set_weights(snapshot.weights)
                self.evaluator.sync_filters(snapshot.filters)
            except Exception:
                # CRUCIAL: never answer with half of the new policies: restore the old ones.
                self.evaluator.set_weights(old_weights)
                self.evaluator.sync_filters(old_filters)
                raise
            self.version = version
        return version

    def stop(self) -> None:
        """Release the trainer."""
        self.trainer.stop()
