"""The optimizer microbenchmark (``hierl bench optimizers``, ``benchmarks/optimizers.py``)
and the records every benchmark writes.

``optimizers`` measures the strategies and the SGD throughput, ``options`` declares its
command-line options once (for the ``hierl`` parser and ``optimizers.main``), ``report``
writes a benchmark's JSON record (commit, machine, config, figures) and bar charts (used
by ``hierl bench`` and ``benchmarks/``).  Importing this package imports nothing heavy.
"""
