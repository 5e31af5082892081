"""The multi-agent rollout loop: several MultiAgentEnvs, several policies, one batch per policy.

Each step ("tick") every env copy is stepped once.  The agents that are to act (those in
each env's last ``obs`` dict) are grouped by the policy ``policy_mapping_fn`` gave them,
so each policy runs one batched ``compute_actions`` per tick over all its agents in all
env copies.  Every agent has its own trajectory: a row is opened when the agent acts,
collects the rewards the agent receives until it observes again (turn-based games) and
is closed by that observation, by the agent leaving, or by the end of the episode.

At the end of an episode (and, with ``truncate_episodes``, at the end of each fragment)
each agent's rows become one SampleBatch, postprocessed by its policy with the other
agents' batches of the same episode and fragment (``other_agent_batches``: agent id →
``(policy_id, SampleBatch)``, RLlib's convention; what a centralized critic reads).
The result is a MultiAgentBatch counting environment steps.

Callbacks (``hierl.evaluators.callbacks``) see one episode per env copy: its
observations, infos and actions are the env's dicts by agent id, its reward the step's sum
over the agents.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierl.evaluators.env import EnvContext, EnvError
from hierl.evaluators.filters import NoFilter
from hierl.evaluators.multi_agent_env import ALL, MultiAgentEnv
from hierl.evaluators.rollout_core import (
    EpisodeRecord,
    FragmentSampler,
    RolloutSettings,
    act,
    batch_obs,
)
from hierl.models.preprocessors import Preprocessor
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import MultiAgentBatch, SampleBatch

if TYPE_CHECKING:
    from hierl.evaluators.policy_evaluator import PolicyEvaluator

SB = SampleBatch


@dataclass
class MultiAgentEpisodeRecord(EpisodeRecord):
    """A finished multi-agent episode: ``episode_reward`` is the sum over all agents.

    ``episode_length`` counts environment steps.
    """

    agent_rewards: dict[Any, float] = field(default_factory=dict)
    """Return of each agent id."""
    agent_policies: dict[Any, str] = field(default_factory=dict)
    """The policy id each agent was mapped to."""

    @property
    def policy_rewards(self) -> dict[str, list[float]]:
        """Policy id → the returns of the agents it controlled in this episode."""
        out: dict[str, list[float]] = {}
        for aid, r in self.agent_rewards.items():
            out.setdefault(self.agent_policies[aid], []).append(r)
        return out


class _Agent:
    """One agent's trajectory in the current episode of one env copy."""

    __slots__ = ("index", "open", "policy_id", "rows")

    def __init__(self, policy_id: str, index: int):
        self.policy_id = policy_id
        self.index = index
        self.rows: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # acted, waiting for its next observation


class _Slot:
    """One env copy and the bookkeeping of its current episode."""

    def __init__(self, env: MultiAgentEnv, index: int):
        self.env = env
        self.index = index
        self.eps_id = 0
        self.agents: dict[Any, _Agent] = {}
        self.to_act: dict[Any, np.ndarray] = {}
        self.done: set[Any] = set()
        self.length = 0
        self.reward = 0.0
        self.agent_rewards: dict[Any, float] = defaultdict(float)
        self.last_info: dict[str, Any] = {}
        self.last_obs: dict[Any, Any] = {}


class MultiAgentSampler(FragmentSampler):
    """Collects per-policy batches from ``num_envs`` MultiAgentEnv copies.

    ``rollout_fragment_length`` counts environment steps per env copy: a
    ``truncate_episodes`` sample covers ``rollout_fragment_length * len(envs)`` env
    steps (rows per policy depend on how many of its agents acted); with
    ``complete_episodes`` whole episodes are returned, at least that many env steps.

    Args:
        envs: the env copies (the evaluator makes them from the env creator).
        policy_map: policy id → PolicyGraph.
        preprocessors: policy id → Preprocessor of that policy's observation space.
        filters: policy id → observation filter.
        policy_mapping_fn: agent id → policy id (called once per agent per episode).
        settings: the loop's settings; env copy ``j``'s first reset uses ``seed + j``.
    """

    def __init__(
        self,
        envs: Sequence[MultiAgentEnv],
        policy_map: Mapping[str, PolicyGraph],
        preprocessors: Mapping[str, Preprocessor],
        filters: Mapping[str, NoFilter],
        policy_mapping_fn: Callable[[Any], str],
        settings: RolloutSettings,
    ):
        super().__init__(len(envs), settings)
        self.policy_map = policy_map
        self.preprocessors = preprocessors
        self.filters = filters
        self.policy_mapping_fn = policy_mapping_fn
        self.slots = [_Slot(env, j) for j, env in enumerate(envs)]
        self._ready: list[dict[Any, tuple[str, SampleBatch]]] = []
        self._complete_steps = 0
        for slot in self.slots:
            self._reset(slot, None if settings.seed is None else settings.seed + slot.index)

    @classmethod
    def from_evaluator(cls, evaluator: PolicyEvaluator) -> MultiAgentSampler:
        """``num_envs`` copies of the evaluator's MultiAgentEnv and its policies."""
        ev = evaluator
        envs = [
            ev.env_creator(EnvContext(ev.env_config, ev.worker_index, j))
            for j in range(ev.num_envs)
        ]
        return cls(
            envs,
            ev.policy_map,
            ev.preprocessors,
            ev.filters,
            ev.policy_mapping_fn,
            ev.sampler_settings(),
        )

    # -- env calls ---------------------------------------------------------------------
    def _call(self, slot: _Slot, method: str, *args: Any, **kwargs: Any) -> Any:
        out = self.call_env(slot.env, method, *args, sub_env=slot.index, **kwargs)
        if not all(isinstance(d, Mapping) for d in out):
            raise EnvError(
                f"env '{self.env_id}' {method}() must return dicts keyed by agent id "
                f"(a MultiAgentEnv), got {tuple(type(d).__name__ for d in out)}"
            )
        return out

    def _agent(self, slot: _Slot, aid: Any) -> _Agent:
        agent = slot.agents.get(aid)
        if agent is None:
            pid = self.policy_mapping_fn(aid)
            if pid not in self.policy_map:
                raise ValueError(
                    f"policy_mapping_fn returned {pid!r} for agent {aid!r}; valid policy ids: "
                    f"{sorted(self.policy_map)}"
                )
            agent = slot.agents[aid] = _Agent(pid, len(slot.agents))
        return agent

    def _process(self, items: list[tuple[_Slot, Any, Any, bool]]) -> dict[tuple[int, Any], Any]:
        """Preprocess and filter raw observations, batched per (policy, is-final)."""
        groups: dict[tuple[str, bool], list[tuple[_Slot, Any, Any]]] = defaultdict(list)
        for slot, aid, raw, final in items:
            groups[(slot.agents[aid].policy_id, final)].append((slot, aid, raw))
        out = {}
        for (pid, final), members in groups.items():
            space = self.policy_map[pid].observation_space
            flat = self.preprocessors[pid].transform(batch_obs(space, [m[2] for m in members]))
            # final observations only feed bootstrapping: they do not update the filter
            # (the rule of every sampler, see hierl.evaluators.filters)
            flat = self.filters[pid](flat, update=not final)
            for i, (slot, aid, _) in enumerate(members):
                out[(slot.index, aid)] = flat[i]
        return out

    def _reset(self, slot: _Slot, seed: int | None = None) -> None:
        obs, info = self._call(slot, "reset", seed=seed)
        slot.eps_id = self.new_episode_id()
        slot.agents, slot.done, slot.to_act = {}, set(), {}
        slot.length, slot.reward, slot.agent_rewards = 0, 0.0, defaultdict(float)
        slot.last_info = dict(info)
        for aid in obs:
            self._agent(slot, aid)
        processed = self._process([(slot, aid, o, False) for aid, o in obs.items()])
        slot.to_act = {aid: processed[(slot.index, aid)] for aid in obs}
        if self.callbacks is not None:
            self.start_episode(slot.index, slot.eps_id, obs, info)
            self.live[slot.index].agent_rewards = slot.agent_rewards

    # -- one step of every env copy ----------------------------------------------------
    def _tick(self) -> None:
        """Act for every agent to act, step every env copy, record, end episodes."""
        action_dicts = self._act()
        observed, flags = [], []
        for slot in self.slots:
            flags.append(self._step(slot, action_dicts[slot.index], observed))
        processed = self._process(observed)
        for slot, (term, trunc, all_term, all_done) in zip(self.slots, flags, strict=True):
            self._record(slot, processed, term, trunc, all_term, all_done)
            if all_done:
                self._end_episode(slot)

    def _act(self) -> list[dict[Any, Any]]:
        """One batched ``compute_actions`` per policy over its agents in all env copies;
        opens each acting agent's row.  Returns each env copy's action dict."""
        groups: dict[str, list[tuple[_Slot, Any]]] = defaultdict(list)
        for slot in self.slots:
            for aid in slot.to_act:
                groups[slot.agents[aid].policy_id].append((slot, aid))
        action_dicts: list[dict[Any, Any]] = [{} for _ in self.slots]
        for pid, members in groups.items():
            policy = self.policy_map[pid]
            obs = np.stack([slot.to_act[aid] for slot, aid in members])
            acted = act(policy, obs, policy.action_space, explore=self.explore)
            for i, (slot, aid) in enumerate(members):
                row = {k: v[i] for k, v in acted.extra.items()}
                # T is the env step the agent acted at (as in single-agent batches), so
                # other agents' rows of the same step align even if an agent entered late.
                row.update({SB.OBS: obs[i], SB.ACTIONS: acted.actions[i], SB.REWARDS: 0.0})
                row[SB.T] = slot.length
                slot.agents[aid].open = row
                action_dicts[slot.index][aid] = acted.env_actions[i]
        return action_dicts

    def _step(
        self, slot: _Slot, actions: dict[Any, Any], observed: list[tuple[_Slot, Any, Any, bool]]
    ) -> tuple[dict[Any, bool], dict[Any, bool], bool, bool]:
        """Step one env copy; add the rewards; append its raw observations (with whether
        each is final) to ``observed``.  Returns ``(terminateds, truncateds, all
        terminated, all done)``."""
        slot.to_act = {}
        obs, rew, term, trunc, info = self._call(slot, "step", actions)
        slot.last_obs = obs
        if ALL not in term or ALL not in trunc:
            raise EnvError(
                f"env '{self.env_id}' step() must put '{ALL}' in terminateds and truncateds"
            )
        slot.length += 1
        for aid, r in rew.items():
            agent = self._agent(slot, aid)
            slot.reward += float(r)
            slot.agent_rewards[aid] += float(r)
            if agent.open is not None:
                agent.open[SB.REWARDS] += float(r)
        all_term, all_trunc = bool(term[ALL]), bool(trunc[ALL])
        all_done = all_term or all_trunc
        for aid, o in obs.items():
            if aid in slot.done:
                raise EnvError(
                    f"env '{self.env_id}' returned an observation for agent {aid!r} after "
                    "it was done in this episode"
                )
            self._agent(slot, aid)
            final = bool(term.get(aid) or trunc.get(aid)) or all_done
            observed.append((slot, aid, o, final))
        slot.last_info = dict(info)
        if self.step_hook:
            self.step_episode(slot.index, float(sum(rew.values())), obs, info, actions)
        return term, trunc, all_term, all_done

    def _record(
        self,
        slot: _Slot,
        processed: dict[tuple[int, Any], Any],
        term: dict[Any, bool],
        trunc: dict[Any, bool],
        all_term: bool,
        all_done: bool,
    ) -> None:
        """Close the rows of the agents that observed or left; queue the next actors."""
        for aid, agent in slot.agents.items():
            if aid in slot.done:
                continue
            a_term, a_trunc = bool(term.get(aid, False)), bool(trunc.get(aid, False))
            if all_done and not (a_term or a_trunc):
                a_term, a_trunc = all_term, not all_term
            new = processed.get((slot.index, aid))
            if agent.open is not None and (new is not None or a_term or a_trunc):
                row, agent.open = agent.open, None
                # CRUCIAL: an agent that leaves without a final obs bootstraps (if
                # truncated) from the obs it last acted on, never from another agent's.
                row[SB.NEW_OBS] = new if new is not None else row[SB.OBS]
                row[SB.TERMINATEDS], row[SB.TRUNCATEDS] = a_term, a_trunc
                agent.rows.append(row)
            if a_term or a_trunc:
                slot.done.add(aid)
            elif new is not None:
                slot.to_act[aid] = new

    def _end_episode(self, slot: _Slot) -> None:
        episode = MultiAgentEpisodeRecord(
            float(slot.reward),
            int(slot.length),
            slot.index,
            agent_rewards=dict(slot.agent_rewards),
            agent_policies={aid: a.policy_id for aid, a in slot.agents.items()},
        )
        self.end_episode(episode, slot.last_info, slot.last_obs)
        self._flush(slot)
        self._complete_steps += slot.length
        self._reset(slot)

    def _flush(self, slot: _Slot) -> None:
        """Turn every agent's closed rows into a SampleBatch; one chunk per env copy."""
        chunk = {}
        for aid, agent in slot.agents.items():
            if agent.rows:
                chunk[aid] = (agent.policy_id, self._to_batch(agent, slot.eps_id))
                agent.rows = []
        if chunk:
            self._ready.append(chunk)

    def _to_batch(self, agent: _Agent, eps_id: int) -> SampleBatch:
        rows = agent.rows
        n = len(rows)
        columns = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        columns[SB.REWARDS] = self.clip(columns[SB.REWARDS].astype(np.float32))
        columns[SB.TERMINATEDS] = columns[SB.TERMINATEDS].astype(bool)
        columns[SB.TRUNCATEDS] = columns[SB.TRUNCATEDS].astype(bool)
        columns[SB.T] = columns[SB.T].astype(np.int64)
        columns[SB.EPS_ID] = np.full(n, eps_id, dtype=np.int64)
        columns[SB.AGENT_INDEX] = np.full(n, agent.index, dtype=np.int64)
        return SampleBatch(columns)

    # -- batches -----------------------------------------------------------------------
    def _sample_fragment(self) -> MultiAgentBatch:
        for _ in range(self.fragment_length):
            self._tick()
        for slot in self.slots:
            self._flush(slot)
        return self._postprocess(self.fragment_length * self.num_envs)

    def _sample_episodes(self, min_steps: int) -> MultiAgentBatch:
        self._complete_steps = 0
        while self._complete_steps < min_steps:
            self._tick()
        return self._postprocess(self._complete_steps)

    def _postprocess(self, env_steps: int) -> MultiAgentBatch:
        """Each ready agent batch postprocessed by its policy, with the other agents'
        batches of the same chunk; one MultiAgentBatch of ``env_steps``."""
        chunks, self._ready = self._ready, []
        per_policy: dict[str, list[SampleBatch]] = defaultdict(list)
        for chunk in chunks:
            for aid, (pid, batch) in chunk.items():
                others = {o: pb for o, pb in chunk.items() if o != aid}
                # a shallow copy: columns the policy adds stay out of the others' view
                own = SampleBatch(dict(batch))
                if self.raw_batches is not None:
                    self.raw_batches.append((pid, SampleBatch(dict(batch))))
                own = self.policy_map[pid].postprocess_trajectory(own, others)
                self.postprocessed(own, pid, self.policy_map[pid], aid, others)
                per_policy[pid].append(own)
        self.steps_sampled += env_steps
        return MultiAgentBatch(
            {pid: SampleBatch.concat_samples(bs) for pid, bs in per_policy.items()}, env_steps
        )

    def close(self) -> None:
        """Close every env copy."""
        for slot in self.slots:
            slot.env.close()
