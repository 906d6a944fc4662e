"""Only the kube adapter speaks to clusters: no other module of the apps imports kubernetes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(from|import)\s+kubernetes\b", re.MULTILINE)


def test_only_the_clusters_kube_package_imports_the_kubernetes_client():
    offenders = [
        str(path.relative_to(ROOT))
        for app in ("portal", "scheduling", "clusters", "dashboards")
        for path in (ROOT / app).rglob("*.py")
        if IMPORT.search(path.read_text()) and path.parent != ROOT / "clusters" / "kube"
    ]
    assert offenders == []
