"""What a policy class lacks for an optimizer to train it (the check behind
``PolicyOptimizer.missing_policy_capability``)."""

from __future__ import annotations

from collections.abc import Sequence

from hierl.policy_graph import PolicyGraph


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
