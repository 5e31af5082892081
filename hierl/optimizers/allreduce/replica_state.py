"""Replica state for the ``allreduce`` optimizer: digests, full policy states, sizes.

Run on an evaluator through ``evaluator.apply`` (``weights_digest``, ``policy_states``,
``set_policy_states``) or on the driver's local evaluator.  ``weights_digest`` lets the
driver check that the replicas still hold bit-identical weights; ``policy_states`` and
``set_policy_states`` carry weights *and* optimizer moments, so a replica (or a restored
checkpoint) resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hierl.evaluators import PolicyEvaluator
from hierl.utils import array_digest


def weights_digest(evaluator: PolicyEvaluator) -> str:
    """SHA-256 over the evaluator's weights (policy ids, names, dtypes, shapes and bytes)."""
    return array_digest(evaluator.get_weights())


def policy_states(evaluator: PolicyEvaluator) -> dict[str, Any]:
    """Every policy's full state (weights, optimizer moments, counters) by policy id."""
    return dict(evaluator.foreach_policy(lambda p, pid: (pid, p.get_state())))


def set_policy_states(evaluator: PolicyEvaluator, states: Mapping[str, Any]) -> None:
    """Load states produced by ``policy_states`` (by policy id)."""
    # CRUCIAL: copy first.  Arrays from the Ray object store are read-only views of shared
    # memory; a PolicyGraph whose set_state wraps them without copying (TorchPolicyGraph's
    # copies, a user's may not) would have every replica on the node update the SAME moments.
    states = _map_arrays(states, np.array)
    evaluator.foreach_policy(lambda p, pid: p.set_state(states[pid]) if pid in states else None)


def _map_arrays(tree: Any, fn: Callable[[np.ndarray], Any]) -> Any:
    """``tree`` (dicts, lists, tuples) with ``fn`` applied to every numpy array leaf."""
    if isinstance(tree, np.ndarray):
        return fn(tree)
    if isinstance(tree, Mapping):
        return {k: _map_arrays(v, fn) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_arrays(v, fn) for v in tree)
    return tree


def state_nbytes(tree: Any) -> int:
    """Bytes of the numpy array leaves of ``tree`` (dicts, lists, tuples)."""
    sizes: list[int] = []
    _map_arrays(tree, lambda a: sizes.append(a.nbytes))
    return sum(sizes)
