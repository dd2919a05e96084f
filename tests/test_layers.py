"""The package's layers point down, and no two packages import each other.

The order is docs/architecture.md's: each package may import its own modules and any
package of a lower layer, never one of its own layer or above. Every import statement counts,
including imports inside functions and under `TYPE_CHECKING`: a lazy import hides a dependency
from the reader, not from the design.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top; packages on one line are peers (neither may import the other).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("exporter", "exporter.vocabulary", "exporter.timestamps"),
    ("exporter.contract",),
    ("exporter.model",),
    ("exporter.catalog",),
    ("exporter.sinks", "exporter.sources"),
    ("exporter.overview",),
    ("exporter.wiring",),
    ("exporter.wiring.state",),
    ("exporter.report",),
    ("exporter.web",),
    ("exporter.commands",),
    ("exporter.cli",),
)
# The simulated platform, for `demo` only.
SIMULATOR_USERS = ("exporter.commands.demo",)


def _documented_layers() -> list[list[str]]:
    """The layer lines of docs/architecture.md, e.g. `4. sinks | sources`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("<!-- layers:start -->"):text.index("<!-- layers:end -->")]
    return [re.findall(r"`([\w.]+)`", line.split(":")[0]) for line in section.splitlines()
            if re.match(r"\s*\d+\.", line)]


def _unit(module: str) -> str:
    """The package (or bottom module) a module belongs to, as LAYERS names it."""
    best = ""
    for layer in LAYERS:
        for name in layer:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best = name
    return best


def _rank(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# Every package of the repository, for the file-circle check beyond the exporter.
PACKAGES = ("alerts", "bench", "dashboards", "deploy", "exporter", "tests", "tools", "zaroz_sim")


def imports(package: str, roots: tuple[str, ...] = ("exporter", "zaroz_sim", "tools")
            ) -> dict[str, set[str]]:
    """Every module of `package` and the modules of the packages `roots` it imports."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        name = _module_name(path)
        package_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package_parts[: len(package_parts) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # `from exporter import vocabulary` imports the submodule, not the package
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if (ROOT / (sub.replace(".", "/") + ".py")).exists()
                              or (ROOT / sub.replace(".", "/")).is_dir() else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        out[name] = {m for m in found if m.split(".")[0] in roots}
    return out


def repository_imports() -> dict[str, set[str]]:
    """Every module of the repository's packages and the repository modules it imports."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        graph.update(imports(package, PACKAGES))
    return graph


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        su = _unit(source)
        for target in sorted(targets):
            if target.startswith("zaroz_sim") and source in SIMULATOR_USERS:
                continue
            if not target.startswith("exporter"):
                bad.append(f"{source} -> {target} (outside the package)")
                continue
            tu = _unit(target)
            if tu == su or (tu == "exporter" and target == "exporter"):
                continue
            if _rank(tu) >= _rank(su):
                bad.append(f"{source} -> {target} ({su} may not import {tu})")
    return bad


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in nodes:
        if v not in index:
            visit(v)
    return groups


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of packages (by parent package)."""
    pkg = {m: m.rsplit(".", 1)[0] if m.count(".") > 1 else m for m in graph}
    edges: dict[str, set[str]] = {}
    for m, targets in graph.items():
        for t in targets:
            tp = next((pkg[k] for k in (t, *[t.rsplit(".", i)[0] for i in range(1, 3)])
                       if k in pkg), None)
            if tp is not None and tp != pkg[m]:
                edges.setdefault(pkg[m], set()).add(tp)
    return strongly_connected(sorted(set(pkg.values())), edges)


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules that import each other round a cycle (strongly connected groups of modules),
    other than a package and the submodules it loads itself (`contract` and `detail`)."""
    edges = {m: {t for t in targets if t in graph} for m, targets in graph.items()}
    return [group for group in strongly_connected(sorted(graph), edges)
            if not all(m == group[0] or m.startswith(group[0] + ".") for m in group)]


def test_no_import_points_up_a_layer() -> None:
    graph = imports("exporter")
    assert len(graph) > 50  # the walk found the package
    unplaced = sorted(m for m in graph
                      if not _unit(m) or (_unit(m) == "exporter" and m != "exporter"))
    assert not unplaced, f"in no layer (add them to LAYERS and docs/architecture.md): {unplaced}"
    assert upward_edges(graph) == []


def test_no_package_cycle() -> None:
    assert package_cycles(imports("exporter")) == []


def test_no_module_cycle() -> None:
    """One direction is enough: within sinks/metrics, series and protobuf (encoding) <- table
    <- family <- exposition; lazy imports count too."""
    assert module_cycles(imports("exporter")) == []


def test_no_file_circle_in_the_repository() -> None:
    """No two files import each other round a circle anywhere: deploy/ (write -> chart ->
    generate), tools/, bench/, alerts/, dashboards/, the simulator and the tests' own modules,
    not only the exporter; lazy imports count too."""
    graph = repository_imports()
    for package in PACKAGES:
        assert any(m == package or m.startswith(package + ".") for m in graph), package
    assert {"deploy.chart", "deploy.generate", "deploy.write"} <= graph.keys()
    assert module_cycles(graph) == []


def test_the_checks_catch_an_upward_edge_and_a_cycle() -> None:
    graph = {"exporter.model.units": {"exporter.catalog"},
             "exporter.sources.route": {"exporter.sinks.metrics.route"},
             "exporter.sinks.metrics.route": set(),
             "exporter.catalog": set()}
    assert len(upward_edges(graph)) == 2
    cyc = {"exporter.sinks.metrics.a": {"exporter.sinks.traces.b"},
           "exporter.sinks.traces.b": {"exporter.sinks.metrics.a"}}
    assert package_cycles(cyc) == [["exporter.sinks.metrics", "exporter.sinks.traces"]]
    ring = {"exporter.sinks.metrics.family": {"exporter.sinks.metrics.protobuf"},
            "exporter.sinks.metrics.protobuf": {"exporter.sinks.metrics.table"},
            "exporter.sinks.metrics.table": {"exporter.sinks.metrics.family"},
            "exporter.contract": {"exporter.contract.detail"},
            "exporter.contract.detail": {"exporter.contract"}}
    assert module_cycles(ring) == [["exporter.sinks.metrics.family",
                                    "exporter.sinks.metrics.protobuf",
                                    "exporter.sinks.metrics.table"]]
    pair = {"deploy.chart": {"deploy.generate"}, "deploy.generate": {"deploy.chart"},
            "deploy": set()}
    assert module_cycles(pair) == [["deploy.chart", "deploy.generate"]]


def test_the_simulator_uses_nothing_of_the_exporter_but_its_words() -> None:
    """zaroz_sim plays the platform: it must not borrow the exporter's sources (or its webhook
    signing), or a shared mistake would pass both sides."""
    graph = imports("zaroz_sim")
    assert len(graph) > 10
    borrowed = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                      if t.startswith("exporter")
                      and not t.startswith(("exporter.timestamps", "exporter.vocabulary")))
    assert borrowed == []


def test_docs_architecture_documents_these_layers() -> None:
    documented = _documented_layers()
    expected = [[n.removeprefix("exporter.") if n != "exporter" else "exporter" for n in layer]
                for layer in LAYERS]
    assert documented == expected


# What docs/architecture.md says the model never does: I/O, clocks, asyncio, threads.
IMPURE = ("asyncio", "aiohttp", "os", "io", "pathlib", "socket", "subprocess", "threading",
          "time", "datetime", "random", "logging")


def _stdlib_imports(package: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
        out[_module_name(path)] = found
    return out


def test_the_model_does_no_io_reads_no_clock_and_runs_no_loop() -> None:
    graph = _stdlib_imports("exporter.model")
    assert len(graph) > 5
    assert {m: sorted(ts & set(IMPURE)) for m, ts in graph.items() if ts & set(IMPURE)} == {}


@pytest.mark.parametrize("module", ["exporter.vocabulary", "exporter.timestamps"])
def test_the_bottom_imports_nothing_of_the_exporter(module: str) -> None:
    graph = imports("exporter")
    assert graph[module] == set()
