"""The house rules, checked from the source: no import circles, no Ray below sweeps and in sweeps
only at its edge, every imported package declared, and no references to documents outside the
repository."""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("models", "data_pipeline", "analysis", "sweeps")


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(path: pathlib.Path, name: str, known: set[str]) -> set[str]:
    """The project modules a module imports, at the top or inside functions, by their own names
    (``from a import b`` counts as ``a.b`` when that is a module, else ``a``)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    # a package's __init__ re-exports: importing a submodule does not import its siblings, so
    # edges into a package's __init__ from inside that package are its own business
    return {name: {t for t in imports_of(path, name, known)
                   if not (name.startswith(t + ".") and t in PACKAGES)}
            for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10_000)

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return out


def test_no_module_imports_itself_back_through_others():
    # a package's __init__ imports its modules to re-export them; leave those edges out
    edges = {name: {t for t in targets if t not in PACKAGES} for name, targets in graph().items()}
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_planted_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_models_data_pipeline_and_analysis_know_nothing_of_ray():
    for name, path in modules().items():
        if name.split(".")[0] in ("models", "data_pipeline", "analysis") and name != "data_pipeline.prepare":
            tree = ast.parse(path.read_text())
            imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                        for alias in node.names}
            imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and not node.level}
            assert "ray" not in imported, f"{name} imports ray"


# The sweep side's Ray: its edge (every Ray call) and the trackers, which keep Tune's logger callbacks.
RAY_IN_SWEEPS = {"sweeps/ray_edge.py", "sweeps/tracking.py"}
# The Ray modules whose private names a module may use: the two edges (sweeps', Ray Data's prepare)
PRIVATE_RAY_ALLOWED = {"sweeps/ray_edge.py", "data_pipeline/prepare.py"}


def imports_ray(text: str) -> bool:
    return re.search(r"^\s*(import ray|from ray)\b", text, re.M) is not None


def private_ray_names(text: str) -> list[str]:
    """The private Ray names a module uses: a name with a leading underscore imported from a Ray
    module or reached through one (``ray._private...``), or a private attribute of a Tune object
    that disgen has read (``tuner._local_tuner``, W&B's ``_remote_logger_class``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            found += [node.module] if "._" in f".{node.module}" else []
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("ray") and "._" in a.name]
        elif isinstance(node, ast.Attribute) and node.attr in ("_local_tuner", "_remote_logger_class"):
            found.append(node.attr)
    return found


def test_in_sweeps_only_the_edge_and_the_trackers_import_ray():
    importers = {str(path.relative_to(ROOT)) for path in sorted((ROOT / "sweeps").glob("*.py"))
                 if imports_ray(path.read_text())}
    assert importers == RAY_IN_SWEEPS


def test_private_ray_names_appear_only_at_the_edges():
    used = {str(path.relative_to(ROOT)): private_ray_names(path.read_text()) for path in modules().values()}
    assert {path for path, names in used.items() if names} <= PRIVATE_RAY_ALLOWED, used
    assert used["sweeps/ray_edge.py"]  # the check sees the edge's own


def test_the_ray_checks_find_planted_uses():
    assert imports_ray("import os\n    from ray import tune\n") and not imports_ray("x = 'import ray'\n")
    assert private_ray_names("from ray.air.util.node import _force_on_current_node\n") == [
        "ray.air.util.node._force_on_current_node"]
    assert private_ray_names("from ray._private.services import find\nt._local_tuner\n") == [
        "ray._private.services", "_local_tuner"]
    assert private_ray_names("from ray.tune import Tuner\n") == []


# the import name → the distribution that provides it, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "mlflow": "mlflow-skinny"}


def test_every_third_party_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the dependencies, and the optional extras (an import of one is guarded where it is used)
    extras = project["optional-dependencies"].values()
    declared = [*project["dependencies"], *(d for extra in extras for d in extra)]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for d in declared}
    standard = set(sys.stdlib_module_names)
    missing = set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").split(".")[0]]
            else:
                continue
            for top in tops:
                if top in standard or top in PACKAGES or top == "__future__":
                    continue
                if DISTRIBUTIONS.get(top, top).lower() not in names:
                    missing.add(f"{top} ({path.relative_to(ROOT)})")
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"


def test_code_and_docs_cite_only_what_the_repository_holds():
    texts = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*.md")]
    texts += [path for folder in (*PACKAGES, "tests", "benchmarks") for path in (ROOT / folder).rglob("*.py")]
    offenders = [str(p.relative_to(ROOT)) for p in texts if p.name != "test_architecture.py"
                 and ("SPEC §" in p.read_text() or "ARCHITECTURE.md" in p.read_text())]
    assert offenders == []


def test_the_design_page_names_every_module():
    page = (ROOT / "docs" / "design.md").read_text()
    missing = [str(path.relative_to(ROOT)) for path in modules().values()
               if f"`{path.relative_to(ROOT)}`" not in page]
    assert missing == [], f"docs/design.md does not name {missing}"
