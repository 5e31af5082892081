"""The generators of the docs site's pages, run by ``docs/gen_pages.py`` (mkdocs-gen-files).

Imports flow downward: ``site`` -> the page modules (``results``, ``api``,
``cli_reference``, ``strategies``, ``algorithms``) -> ``records`` -> ``tuned``,
``configs``, ``project`` -> ``markdown``, ``paths``.
"""
