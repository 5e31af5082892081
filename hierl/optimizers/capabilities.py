"""What an optimizer strategy declares about itself, read before any instance exists.

The Trainer refuses a policy or config a strategy cannot train (multi-agent, recurrent,
missing policy methods), ``auto`` compares only interchangeable strategies, and the
resource planner and Tune's mutations ask where the update runs: all from these class
attributes, which ``PolicyOptimizer`` inherits and each strategy sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from hierl.config import Config
from hierl.policy_graph import PolicyGraph

LearnsOn = Literal["driver", "evaluators", "servers", "varies", "none"]
"""The values of ``OptimizerCapabilities.learns_on``."""
LearnsFrom = Literal["samples", "lagged_samples", "replay", "returns"]
"""The values of ``OptimizerCapabilities.learns_from``."""


def _protocol_methods(protocol: type) -> list[str]:
    """The method names a Protocol declares (for error messages)."""
    return sorted(k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_"))


def capability_gap(
    policy_class: type,
    required_class: type | None,
    required_methods: Sequence[str],
    required_protocols: Sequence[type],
) -> str | None:
    """Why ``policy_class`` cannot be trained, as a phrase for an error message, or None.

    It must subclass ``required_class`` (None: any), implement each of
    ``required_methods`` (overriding PolicyGraph's ``NotImplementedError`` default, or
    defining it when PolicyGraph has no such method) and each of ``required_protocols``.
    """
    if required_class is not None and not issubclass(policy_class, required_class):
        return f"it is not a {required_class.__name__} subclass"
    missing = [
        m
        for m in required_methods
        if getattr(policy_class, m, None) is None
        or getattr(policy_class, m) is getattr(PolicyGraph, m, None)
    ]
    missing += [
        f"{protocol.__name__} ({', '.join(_protocol_methods(protocol))})"
        for protocol in required_protocols
        if not issubclass(policy_class, protocol)
    ]
    if missing:
        return f"it does not implement {', '.join(missing)}"
    return None


class OptimizerCapabilities:
    """The declared capabilities of an optimizer strategy (class attributes only)."""

    supports_multi_agent: ClassVar[bool] = False
    """Whether ``step()`` handles MultiAgentBatches (several policies); the Trainer
    refuses a multi-agent config with an optimizer that does not."""
    supports_recurrent: ClassVar[bool] = False
    """Whether its batches keep recurrent sequences whole (``seq_lens``): the Trainer
    refuses ``model.use_lstm`` with an optimizer that shards or trims batches by rows."""
    required_policy_methods: ClassVar[tuple[str, ...]] = ()
    """Policy methods ``step()`` needs beyond the abstract ones: each must be implemented
    by the policy class (overriding PolicyGraph's ``NotImplementedError`` default, e.g.
    ``compute_gradients``), or exist when PolicyGraph has no such method (e.g. ES's
    ``get_flat_weights``)."""
    required_policy_protocols: ClassVar[tuple[type, ...]] = ()
    """Optional capabilities (``hierl.policy_graph`` Protocols, e.g. ``FlatWeights`` for
    ES) the policy class must implement."""
    required_policy_class: ClassVar[type | None] = None
    """Policies must subclass this (e.g. ``TorchPolicyGraph`` for device towers); None:
    any PolicyGraph."""
    learns_from: ClassVar[LearnsFrom] = "samples"
    """What each update learns from: freshly sampled batches, each row once per step
    (``samples``: interchangeable strategies, the ones ``auto`` compares), batches
    sampled by weights a few updates old (``lagged_samples``, ``aso``: the algorithm
    must correct for the lag, e.g. V-trace), rows drawn again from a ``replay`` buffer,
    or episode ``returns`` (ES, no gradients)."""
    samples_to_driver: ClassVar[bool] = True
    """Its bulk data into the driver are the sampled rows (``local``, ``multi_gpu``,
    the replay optimizers); False: samples stay on the evaluators and gradients or
    weights travel instead (``allreduce``, ``async``, ``sharded_ps``)."""
    uses_device_towers: ClassVar[bool] = False
    """Its learner splits each batch over device towers (``multi_gpu``): the strategy to
    prefer with a GPU and a loss that allows several SGD passes."""
    learns_on: ClassVar[LearnsOn] = "driver"
    """Where the policy's own update (its torch optimizer) runs: on the ``driver``'s
    policy, on the ``evaluators``' replicas, on ``servers`` that hold the weights and
    run their own update (the policy's optimizer is unused), ``varies`` (``auto``: the
    chosen strategy's) or ``none`` (no gradient updates, e.g. ES).  Settings that change
    the policies' optimizer at run time (Tune's learning-rate mutation) apply only with
    ``driver`` or ``evaluators``."""

    @classmethod
    def missing_policy_capability(
        cls, policy_class: type, config: Config | None = None
    ) -> str | None:
        """What ``policy_class`` lacks for this optimizer (with ``config``) to train it, as
        a phrase for an error message; None when it can.

        Read from ``required_policy_class``, ``required_policy_methods`` and
        ``required_policy_protocols``; the Trainer
        refuses a policy this returns a reason for, and ``auto`` skips such candidates.
        """
        return capability_gap(
            policy_class,
            cls.required_policy_class,
            cls.required_policy_methods,
            cls.required_policy_protocols,
        )
