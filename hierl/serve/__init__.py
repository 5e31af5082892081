"""Serving trained policies: a checkpoint's policy behind an HTTP JSON endpoint on Ray
Serve (``hierl serve CHECKPOINT``, ``deploy``), with dynamic batching, hot-swapped
weights pushed by a running trainer (``serve_deployment`` config) and a shared token;
and ``PolicyClient``, with which apps that own their loop
drive a trainer's episodes (``input: "external"``).

Names are imported lazily: ``import hierl.serve`` loads neither Ray nor torch.
"""

from __future__ import annotations

from hierl._lazy import lazy_exports

_EXPORTS = {
    "PolicyClient": "hierl.serve.client",
    "PolicyClientError": "hierl.serve.client",
    "PolicyServer": "hierl.serve.deployment",
    "ServeError": "hierl.serve.deployment",
    "ServeOptions": "hierl.serve.options",
    "ServedApp": "hierl.serve.deployment",
    "ServedPolicy": "hierl.serve.policy",
    "ServedSearch": "hierl.serve.search",
    "deploy": "hierl.serve.deployment",
    "serve_until_interrupted": "hierl.serve.deployment",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("hierl.serve", globals(), _EXPORTS)
