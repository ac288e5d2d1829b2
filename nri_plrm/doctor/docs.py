"""Where doctor's fixes send the operator: the documentation installed on this node (the .deb and
the container image put it in :data:`DOC_DIR`), else the source tree's ``docs/`` and that path."""

from __future__ import annotations

import os

DOC_DIR = "/usr/share/doc/nri-plrm"
"""Where the .deb (and the container image) install README.md and docs/*.md."""


def doc_ref(page: str, section: str = "", doc_dir: str = DOC_DIR) -> str:
    """The page (``install.md``) to read, with its ``section``: the installed copy when this node
    has it, else both the source tree's ``docs/`` page and the installed path."""
    installed = f"{doc_dir}/{page}"
    where = installed if os.path.isfile(installed) else f"docs/{page} (on a node: {installed})"
    return f"{where}, {section}" if section else where
