"""The README's module map names every module, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "turnwatch"


def test_the_module_map_matches_the_code() -> None:
    text = (ROOT / "README.md").read_text()
    body = text.split("## Module map\n", 1)[1].split("\n## ", 1)[0]
    mapped = set(re.findall(r"`([a-z_/]+\.py)`", body))
    actual = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    assert sorted(actual - mapped) == [], "modules the README's map does not name"
    assert sorted(mapped - actual) == [], "the README's map names modules that do not exist"
