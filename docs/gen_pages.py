"""The generated pages of the docs site, written at build time by mkdocs-gen-files.

``mkdocs build`` runs this file (the ``gen-files`` plugin of ``mkdocs.yml``); nothing it
writes is committed.  Every page comes from a source the code or the records already
hold, so the site cannot drift from them:

* ``algorithms/``: one page per registered trainer (``hierl.algorithms.registry``): its
  module and class docstrings, the action and observation spaces its policy class
  accepts (probed by building the policy on each kind of space), the strategies of
  ``optimizer_choices()`` (what ``hierl list`` and ``hierl config`` read), the config
  table of its config dataclass (the attribute docstrings ``hierl config`` prints, read
  by ``hierl.config.field_docs``), its ``examples/tuned/*.yaml`` files and its published
  results (``benchmarks/RESULTS.md`` blocks, ``benchmarks/curves/*/``);
* ``strategies/``: one page per registered policy optimizer (``hierl.optimizers``);
* ``reference/cli.md``: the ``hierl`` argparse parser (``hierl.cli.parser.build_parser``);
* ``reference/api/``: mkdocstrings pages for every public name (the ``__all__`` of each
  public package, the public modules as a whole, every trainer and config class);
* ``benchmarks/results.md``: the benchmark records (``benchmarks/records/*.json`` of
  the optimizer, sampling and serving benchmarks, ``summary.json`` files and
  ``benchmarks/RESULTS.md``);
* ``changelog.md``, ``contributing.md``, ``citation.md``: the repository's
  ``CHANGELOG.md``, ``CONTRIBUTING.md`` and ``CITATION.cff``.

The logic is in plain functions in the ``docs/gen/`` package, one module per kind of
page (``docs.gen.site.generated_pages()`` returns every page as text) so that
``tests/test_docs.py`` can check the pages without building the site.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the repository's hierl and tests.support, not an installed copy
    sys.path.insert(0, str(ROOT))

from docs.gen.site import copied_files, expand_nav, generated_pages, nav_sections  # noqa: E402


def main() -> None:
    """Write the pages and figures into the build (mkdocs-gen-files) and fill the nav."""
    import mkdocs_gen_files

    pages = generated_pages()
    for path, text in pages.items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)
    for path, source in copied_files().items():
        with mkdocs_gen_files.open(path, "wb") as f:
            f.write(source.read_bytes())
    config = mkdocs_gen_files.config
    if config.nav:
        config.nav = expand_nav(config.nav, nav_sections(pages))


if __name__ in ("__main__", "<run_path>"):
    main()
