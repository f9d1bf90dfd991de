"""The import layering of docs/architecture.md: data flows device_model -> monitor -> {exporters, tui},
and device_model -> profiler. textual lives only in tui/, prometheus_client only in exporters/."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWED = {
    "device_model": set(),
    "monitor": {"device_model"},
    "exporters": {"monitor"},
    "tui": {"monitor"},
    "profiler": {"device_model"},
}
ONLY_IN = {"textual": {"tui"}, "prometheus_client": {"exporters"}}


def imported_roots(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def layering_violations(root: pathlib.Path) -> list[str]:
    bad = []
    for pkg, allowed in ALLOWED.items():
        for f in sorted((root / pkg).rglob("*.py")):
            for line, name in imported_roots(f):
                if name in ALLOWED and name != pkg and name not in allowed:
                    bad.append(f"{f.relative_to(root)}:{line} imports {name}")
                if name in ONLY_IN and pkg not in ONLY_IN[name]:
                    bad.append(f"{f.relative_to(root)}:{line} imports {name}")
    return bad


def test_packages_exist():
    for pkg in ALLOWED:
        assert (ROOT / pkg / "__init__.py").is_file(), pkg


def test_every_package_has_its_place_in_the_layering():
    """A new top-level package (a sink that imports only monitor, say) is checked only once it
    is in ALLOWED: one that is not fails here rather than going unchecked."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(ALLOWED), packages ^ set(ALLOWED)


def test_imports_follow_the_layering():
    assert layering_violations(ROOT) == []


@pytest.mark.parametrize(
    "pkg, source",
    [
        ("device_model", "import monitor.report\n"),
        ("monitor", "from exporters import prometheus\n"),
        ("exporters", "import tui.app\n"),
        ("exporters", "from device_model.catalog.specs import DEVICES\n"),
        ("tui", "import device_model.runtime.shm\n"),
        ("profiler", "from monitor import collector\n"),
        ("monitor", "import textual\n"),
        ("tui", "from prometheus_client import Gauge\n"),
    ],
)
def test_checker_catches_violations(tmp_path, pkg, source):
    for p in ALLOWED:
        (tmp_path / p).mkdir()
    (tmp_path / pkg / "bad.py").write_text(source)
    assert len(layering_violations(tmp_path)) == 1
