"""The shape of the house (issue 31; docs/architecture.md), checked from the source.

Each rule is read off the syntax tree, so a change that breaks one fails here with the
file and line: no branch on the learner's parameterisation outside the penalty modules,
no isinstance on a target class outside spec.py, no private name imported across modules
(the compiled leaf kernel modules ``_*_kernels`` are imported as modules by design), no
import cycle at import time, no command-line module over 500 lines, no function body over
120 lines outside the Numba kernel factories.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("amp_attention", "solvers") for p in (ROOT / d).rglob("*.py"))
TARGET_CLASSES = {"WishartTarget", "SpikedTarget", "PowerLawTarget", "CustomTarget"}
#: modules whose functions build compiled kernels (long by nature: one loop nest each)
KERNEL_MODULES = {"_channel_kernels.py", "_subordination_kernels.py", "_operator_kernels.py"}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _trees():
    for p in SOURCES:
        yield p, ast.parse(p.read_text(), filename=str(p))


def _mentions_parameterisation(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "parameterisation") or (
        isinstance(node, ast.Name) and node.id == "parameterisation")


def _is_str_choice(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)


def test_no_branch_on_the_parameterisation_outside_the_penalty_modules():
    found = []
    for p, tree in _trees():
        if "penalties" in p.parts:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_mentions_parameterisation(s) for s in sides) and any(
                        _is_str_choice(s) for s in sides):
                    found.append(f"{_rel(p)}:{node.lineno}")
    assert not found, f"branches on the parameterisation (use the penalty object): {found}"


def test_no_isinstance_on_a_target_class_outside_spec():
    found = []
    for p, tree in _trees():
        if p.name == "spec.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" \
                    and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & TARGET_CLASSES:
                    found.append(f"{_rel(p)}:{node.lineno}")
    assert not found, f"isinstance on target classes (use the Target contract): {found}"


def test_no_private_name_is_imported_across_modules():
    found = []
    for p, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not name.startswith("__") \
                            and not name.endswith("_kernels"):
                        found.append(f"{_rel(p)}:{node.lineno} {name}")
    assert not found, f"private names imported across modules: {found}"


def _module_name(p: Path) -> str:
    rel = p.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] == "solvers":
        parts = ["amp_attention", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _top_level_imports(p: Path, tree: ast.Module) -> set[str]:
    """Modules imported when ``p`` is imported (not inside functions or TYPE_CHECKING)."""
    me = _module_name(p)
    package = me if p.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.ImportFrom):
                if sub.level:
                    base = package.split(".")
                    base = base[:len(base) - sub.level + 1]
                    mod = ".".join(base + ([sub.module] if sub.module else []))
                else:
                    mod = sub.module or ""
                if mod.startswith("amp_attention"):
                    out.add(mod)
                    out.update(f"{mod}.{a.name}" for a in sub.names)
            elif isinstance(sub, ast.Import):
                out.update(a.name for a in sub.names if a.name.startswith("amp_attention"))
    return out


def test_no_import_cycle():
    graph = {}
    for p, tree in _trees():
        graph[_module_name(p)] = _top_level_imports(p, tree)
    modules = set(graph)
    graph = {m: {d for d in deps if d in modules and d != m} for m, deps in graph.items()}
    # a package's __init__ importing its own submodules is not a cycle of modules
    colour: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        colour[m] = 1
        for d in sorted(graph[m]):
            if colour.get(d) == 1 and not m.startswith(d + ".") and not d.startswith(m + "."):
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif d not in colour:
                visit(d, stack + [d])
        colour[m] = 2

    for m in sorted(graph):
        if m not in colour:
            visit(m, [m])
    cycles = [c for c in cycles if not any(a.startswith(b + ".") or b.startswith(a + ".")
                                           for a, b in zip(c, c[1:]))]
    assert not cycles, f"import cycles: {cycles}"


def test_no_command_line_module_over_500_lines():
    long = {p.name: n for p in (ROOT / "amp_attention" / "cli").glob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


def test_no_function_body_over_120_lines():
    long = []
    for p, tree in _trees():
        if p.name in KERNEL_MODULES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                doc = isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant)
                first = body[1] if doc and len(body) > 1 else body[0]
                n = node.end_lineno - first.lineno + 1
                if n > 120:
                    long.append(f"{_rel(p)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long
