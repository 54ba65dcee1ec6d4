"""The fast half of the docs check (tests/docs_check.py runs everything verbatim in CI).

Every command of README.md, docs/user_guide.md, docs/cli.md and of the ``--help``
examples parses; every error a doc shows is exactly what the command prints; no
Python block uses a name that no block of its document defines; every ``--help``
ends with two or three worked examples.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
from pathlib import Path

import pytest
from docs_check import DOCS, all_examples, extract, normalise_error

from amp_attention.cli import build_parser, main
from amp_attention.cli.examples import EXAMPLES

COMMANDS, BLOCKS = all_examples()


def test_the_docs_have_examples() -> None:
    for doc in DOCS:
        ex = extract(doc)
        assert ex.commands or ex.python, doc
    assert len(COMMANDS) > 50 and len(BLOCKS) > 10


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: f"{c.doc}:{c.line}:{c.text[14:60]}")
def test_documented_command_parses(cmd) -> None:
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(cmd.argv[1:])
    except SystemExit as exc:  # only --help may leave argparse
        assert exc.code == 0 and "--help" in cmd.argv, (cmd.text, exc.code)


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.expected_error],
                         ids=lambda c: f"{c.doc}:{c.line}")
def test_documented_error_is_what_the_command_prints(cmd) -> None:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(cmd.argv[1:])
    assert code == 2
    assert (normalise_error(err.getvalue().strip().splitlines()[-1])
            == normalise_error(cmd.expected_error))


def _undefined_names(sources: list[str]) -> set[str]:
    """Names loaded by the blocks of a document that none of its blocks defines
    (assignment, import, def, class, argument, loop or comprehension variable)."""
    defined = set(dir(builtins))
    loaded = set()
    for src in sources:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Name):
                (defined if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
            elif isinstance(node, ast.alias):
                defined.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                defined.add(node.name)
    return loaded - defined


@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.doc == d for b in BLOCKS)])
def test_python_blocks_use_only_defined_names(doc: str) -> None:
    """docs/user_guide.md once used S_trained and S0 without defining them (NameError)."""
    assert _undefined_names([b.source for b in BLOCKS if b.doc == doc]) == set()


def test_undefined_name_check_catches_a_missing_definition() -> None:
    assert _undefined_names(["x = 1\n", "print(x + S_trained)\n"]) == {"S_trained"}


@pytest.mark.parametrize("command", list(EXAMPLES))
def test_every_help_ends_with_worked_examples(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command.split(), "--help"])
    out = capsys.readouterr().out
    tail = out[out.rindex("examples:"):]
    shown = [ln.strip() for ln in tail.splitlines() if ln.strip().startswith("amp-attention ")]
    assert 2 <= len(shown) <= 3, tail
    assert shown == [line for line, _ in EXAMPLES[command]]


def test_every_subcommand_has_examples() -> None:
    parser = build_parser()
    import argparse

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = set(sub.choices) - {"heads"}
    heads = next(a for a in sub.choices["heads"]._actions
                 if isinstance(a, argparse._SubParsersAction))
    names |= {f"heads {m}" for m in heads.choices}
    assert names == set(EXAMPLES)


def test_cli_md_synopsis_and_table_list_every_subcommand() -> None:
    """Issue 29: docs/cli.md's synopsis omitted `compare`."""
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = (Path(__file__).resolve().parents[1] / "docs/cli.md").read_text()
    synopsis = re.search(r"^amp-attention \[-h\] \[--version\] \{([^}]*)\}", text, re.M)
    assert synopsis and synopsis.group(1).split(",") == list(sub.choices)
    for name in sub.choices:
        assert f"| `{name}` |" in text and f"## `amp-attention {name}`" in text, name


def test_theory_md_cites_no_file_users_do_not_have() -> None:
    """Issue 29: docs/theory.md cited THEORY.md (and 'THEORY 4.2'), which users do not have."""
    text = (Path(__file__).resolve().parents[1] / "docs/theory.md").read_text()
    assert "THEORY" not in text


ROOT = Path(__file__).resolve().parents[1]
PACKAGE_SOURCES = sorted([*ROOT.joinpath("amp_attention").rglob("*.py"),
                          *ROOT.joinpath("solvers").rglob("*.py")])


def test_docstrings_cite_docs_theory_sections_by_name() -> None:
    """'THEORY 4.3' pointed at a file a pip user does not have: the package cites the
    sections of docs/theory.md by their names, and every name cited exists."""
    headings = [re.sub(r"^#+\s*(\d+(\.\d+)*\.?\s*)?", "", h).strip()
                for h in re.findall(r"^#+ .*$", (ROOT / "docs/theory.md").read_text(), re.M)]
    cited = set()
    for path in PACKAGE_SOURCES:
        text = path.read_text()
        assert not re.search(r"THEORY[ .]", text.replace("THEORY.md", "")), path
        for m in re.finditer(r'docs/theory\.md((?:[,;]? ?(?:"[^"]+"|to|and)\s*)+)', text):
            cited |= {" ".join(n.split()) for n in re.findall(r'"([^"]+)"', m.group(1))}
    assert len(cited) >= 8, cited
    for name in cited:
        assert any(h.startswith(name) for h in headings), (name, "not a docs/theory.md heading")


RESULT_NAME = re.compile(r"Result|Statistics|Fit|Check|Decomposition|Point|Comparison|Spectrum"
                         r"|Outlier$|Structure|Report|Run$")


def _result_classes():
    import dataclasses
    import importlib
    import inspect
    import pkgutil

    import amp_attention
    import amp_attention.solvers

    found = {}
    for pkg in (amp_attention, amp_attention.solvers):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if ".cli" in info.name:
                continue
            mod = importlib.import_module(info.name)
            for name, obj in vars(mod).items():
                if (inspect.isclass(obj) and dataclasses.is_dataclass(obj)
                        and obj.__module__ == mod.__name__ and not name.startswith("_")
                        and RESULT_NAME.search(name)):
                    found[f"{mod.__name__}.{name}"] = obj
    return found


def _undocumented_fields(cls) -> list[str]:
    """Fields declared by ``cls`` that neither its docstring names nor a ``#:`` comment
    documents (the comment may head a group of consecutive fields)."""
    import inspect

    doc = inspect.getdoc(cls) or ""
    source = inspect.getsource(cls).splitlines()
    missing = []
    for name in cls.__dict__.get("__annotations__", {}):
        if name.startswith("_") or re.search(rf"\b{re.escape(name)}\b", doc):
            continue
        idx = next(i for i, ln in enumerate(source) if re.match(rf"\s+{name}\s*:", ln))
        j = idx - 1
        while j > 0 and re.match(r"\s+\w+\s*:", source[j]) and "#:" not in source[j]:
            j -= 1  # walk up over the other fields of a documented group
        if not source[j].strip().startswith("#:"):
            missing.append(name)
    return missing


def test_result_dataclasses_document_every_field() -> None:
    classes = _result_classes()
    assert len(classes) >= 20, sorted(classes)
    bad = {name: miss for name, cls in classes.items() if (miss := _undocumented_fields(cls))}
    assert bad == {}
