"""No import circle inside analysis/ (report ↔ html_report was one), found from the source."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def analysis_imports() -> dict[str, set[str]]:
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (ROOT / "analysis").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("analysis"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("analysis"))
        graph[name] = {m for m in found if m in modules and m != name and m != "analysis"}
    return graph


def test_no_import_circle_in_analysis():
    graph = analysis_imports()
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph[node]):
            assert state.get(target) != "open", " → ".join(path + [target])
            if target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert "analysis.report" not in graph["analysis.html_report"]
