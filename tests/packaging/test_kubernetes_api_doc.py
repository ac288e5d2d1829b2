"""docs/kubernetes-api.md against the code (issue 31 item 3)."""

from __future__ import annotations

import re
from pathlib import Path

from nri_plrm.plugin.resizes import Resizes
from nri_plrm.podsource.kube import resized

REPO = Path(__file__).resolve().parents[2]


def _limits() -> str:
    text = (REPO / "docs" / "kubernetes-api.md").read_text()
    return text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]


def test_limits_say_resizes_are_followed_through_the_code_that_does_it() -> None:
    limits = _limits()
    assert not re.search(r"resizes?[^.]*\bnot\s+followed", limits, re.S), limits
    assert "In-place resizes are followed" in limits
    assert callable(resized) and callable(Resizes.follow)
    assert "`resized`" in limits and "`Resizes.follow`" in limits
    assert "docs/design.md section 10" in limits and "`[resize]`" in limits
