"""The shape of the house (issue 31; docs/architecture.md), checked from the source.

Each rule is read off the syntax tree, so a change that breaks one fails here with the
file and line: no branch on the learner's parameterisation outside the penalty modules,
no isinstance on a target class outside spec.py, no private name imported across modules
(the compiled leaf kernel modules ``_*_kernels`` are imported as modules by design), no
import cycle at import time, no command-line module over 500 lines, no function body over
120 lines outside the Numba kernel factories; sweeps live in the experiments (no module of
the theory imports the runner, the atomic writers or read_checkpoint, or Adam; only
``amp_attention/experiments/`` and the runner itself use the checkpoint protocol).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for d in ("amp_attention", "solvers") for p in (ROOT / d).rglob("*.py"))
TARGET_CLASSES = {"WishartTarget", "SpikedTarget", "PowerLawTarget", "CustomTarget"}
#: modules whose functions build compiled kernels (long by nature: one loop nest each)
KERNEL_MODULES = {"_channel_kernels.py", "_subordination_kernels.py", "_operator_kernels.py"}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


@cache
def _parsed() -> tuple[tuple[Path, ast.Module], ...]:
    # parsed once for every rule (the trees are only read)
    return tuple((p, ast.parse(p.read_text(), filename=str(p))) for p in SOURCES)


def _trees():
    return iter(_parsed())


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


def _imported_module(p: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module ``node`` (in file ``p``) imports from."""
    if not node.level:
        return node.module or ""
    me = _module_name(p)
    base = (me if p.name == "__init__.py" else me.rsplit(".", 1)[0]).split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _top_level_imports(p: Path, tree: ast.Module) -> set[str]:
    """Modules imported when ``p`` is imported (not inside functions or TYPE_CHECKING)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(sub, ast.ImportFrom):
                mod = _imported_module(p, sub)
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


# ------------------------------------------------------------------ where sweeps live

#: what only a sweep needs: the runner, the atomic writers and checkpoint reader of
#: ``files`` (or the whole module), finite-d training by Adam
SWEEP_ONLY = {"amp_attention.runner", "amp_attention.adam", "amp_attention.files",
              *(f"amp_attention.files.{n}" for n in (
                  "atomic_write_text", "atomic_write_json", "atomic_write_csv",
                  "atomic_write_npz", "atomic_save_figure", "read_checkpoint"))}
#: the checkpoint protocol of resumable sweeps
CHECKPOINT_NAMES = ("run_checkpointed", "Checkpoints", "CheckpointFile")


def _all_imports(p: Path, tree: ast.AST):
    """(line, imported name) of every import anywhere in the file, function bodies
    included: ``module.name`` for ``from module import name``, ``module`` for
    ``import module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _imported_module(p, node)
            for a in node.names:
                yield node.lineno, f"{mod}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name


def _sweep_only_imports(p: Path, tree: ast.AST) -> list[str]:
    return [f"{_rel(p)}:{line} {name}" for line, name in _all_imports(p, tree)
            if name in SWEEP_ONLY or name.startswith(("amp_attention.runner.",
                                                      "amp_attention.adam."))]


def _uses_checkpoints(p: Path, tree: ast.AST) -> list[int]:
    """Lines that import the checkpoint protocol (or reach it as ``runner.<name>``)."""
    lines = [line for line, name in _all_imports(p, tree)
             if name in {f"amp_attention.runner.{n}" for n in CHECKPOINT_NAMES}]
    return lines + [node.lineno for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and node.attr in CHECKPOINT_NAMES]


def test_the_theory_has_no_sweeps():
    """solvers/ keeps the theory at a point: no output directories, no checkpoints, no
    finite-d training (docs/architecture.md "How to add a sweep")."""
    found = [hit for p, tree in _trees() if p.relative_to(ROOT).parts[0] == "solvers"
             for hit in _sweep_only_imports(p, tree)]
    assert not found, f"sweep machinery imported by the theory (move it to experiments/): {found}"


def test_only_the_experiments_use_the_checkpoint_protocol():
    users = {_rel(p) for p, tree in _trees() if _uses_checkpoints(p, tree)}
    outside = sorted(u for u in users if not u.startswith("amp_attention/experiments/")
                     and u != "amp_attention/runner.py")
    assert not outside, f"resumable sweeps outside amp_attention/experiments/: {outside}"
    # the rule sees the sweeps that are there
    assert {"amp_attention/experiments/validate.py", "amp_attention/experiments/scaling.py",
            "amp_attention/experiments/phase_diagram.py"} <= users, users


def test_the_sweep_rules_see_every_form_of_import():
    """The two rules above fail on a theory module that imports a sweep's tools: at the
    top, inside a function, relatively or as a module."""
    theory = ROOT / "solvers" / "example.py"
    for source in ("from amp_attention.runner import run_tasks",
                   "def f():\n    from ..runner import Checkpoints",
                   "from amp_attention.files import atomic_write_json",
                   "from ..files import read_checkpoint",
                   "from amp_attention import files",
                   "import amp_attention.adam",
                   "from amp_attention.adam import train_layer"):
        assert _sweep_only_imports(theory, ast.parse(source)), source
    assert not _sweep_only_imports(theory, ast.parse(
        "from amp_attention.files import ensure_directory\nfrom .state_evolution import SEResult"))
    for source in ("def f():\n    from ..runner import run_checkpointed",
                   "from amp_attention import runner\nstore = runner.Checkpoints('out')"):
        assert _uses_checkpoints(theory, ast.parse(source)), source
    assert not _uses_checkpoints(theory, ast.parse("from amp_attention.runner import run_tasks"))
