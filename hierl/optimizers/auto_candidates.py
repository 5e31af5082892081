"""``auto``'s candidates: which strategies it may compare, which can train a policy,
and the arXiv appendix-C order it tries them in (read from the strategies' capabilities).
"""

from __future__ import annotations

from collections.abc import Sequence

from hierl.optimizers.registry import get_optimizer_class, optimizer_names


def gradient_strategies() -> tuple[str, ...]:
    """The registered strategies ``auto`` may compare: those that learn from fresh
    samples (``learns_from``; the same algorithm semantics per sample), except itself."""
    return tuple(
        name
        for name in optimizer_names()
        if get_optimizer_class(name).learns_from == "samples"
        and get_optimizer_class(name).learns_on != "varies"
    )


def initial_order(
    candidates: tuple[str, ...] | list[str],
    *,
    num_remote_evaluators: int,
    has_gpu: bool,
    num_sgd_iter: int,
    sample_bytes: int,
    model_bytes: int,
) -> list[str]:
    """Order the candidates by the appendix-C heuristics, most promising first.

    Read from each strategy's capabilities (``samples_to_driver``, ``uses_device_towers``):

    - no remote evaluators: every strategy runs in-process; driver-side SGD first;
    - a GPU on the driver and a loss that allows several passes: device towers
      (``multi_gpu``) first;
    - samples larger than the model traffic of a round (model x evaluators): keep
      samples on the evaluators (``allreduce``, ``async``, ``sharded_ps``) first;
    - otherwise send samples to the driver (``local``, ``multi_gpu``) first.

    Ties keep name order.
    """
    towers_first = has_gpu and num_sgd_iter > 1
    big_samples = sample_bytes > model_bytes * num_remote_evaluators
    samples_stay = bool(num_remote_evaluators) and big_samples and not towers_first

    def key(name: str) -> tuple[bool, bool, str]:
        cls = get_optimizer_class(name)
        return (
            cls.samples_to_driver == samples_stay,
            cls.uses_device_towers != towers_first,
            name,
        )

    return sorted(candidates, key=key)


def skipped_candidates(candidates: Sequence[str], policy_classes: Sequence[type]) -> dict[str, str]:
    """The candidates that cannot train every class of ``policy_classes`` → the reason
    (``PolicyOptimizer.missing_policy_capability``), in candidate order."""
    out = {}
    for name in candidates:
        cls = get_optimizer_class(name)
        for policy_class in policy_classes:
            why = cls.missing_policy_capability(policy_class)
            if why:
                out[name] = f"{policy_class.__name__}: {why}"
                break
    return out
