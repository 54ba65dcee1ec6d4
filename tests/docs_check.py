"""Docs check: every command and Python example of README.md, docs/user_guide.md,
docs/cli.md and docs/paper.md, and every worked example of ``--help``, run verbatim.

    python tests/docs_check.py [--only README.md] [--list] [--json FILE]

What counts as a documented command: a line of a fenced code block (```sh, ```console
or plain ```) that starts with ``amp-attention `` or ``$ amp-attention `` (the part of a
``&&`` chain from ``amp-attention`` on; ``\\`` continuations joined), and an inline code
span `` `amp-attention ... --flag ...` `` with at least one flag; synopsis lines with
placeholders (``[...]``, ``{...}``, ``<...>``, ``...``) are not commands.  A command
shown with ``$`` and followed by an ``amp-attention...error:`` line is expected to
fail with exit 2 and exactly that line on stderr; every other command must exit 0.
Python blocks (```python) run in order, one namespace per document.

Everything runs in a fresh temporary directory (one subdirectory per document and
per ``--help``: two documents may use the same ``--out`` for different parameters),
so outputs never land in the repository.  CI (.ci/run) runs this after the test suite; tests/test_docs.py checks
the fast part (every command parses, the shown errors are exact, no Python block
uses an undefined name) in the default test run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/user_guide.md", "docs/cli.md", "docs/paper.md")
PLACEHOLDER = re.compile(r"[\[\]{}<>]|\.\.\.")


@dataclass
class Command:
    doc: str
    line: int
    argv: list[str]
    expected_error: str | None = None  # the stderr line the doc shows, if any

    @property
    def text(self) -> str:
        return " ".join(self.argv)


@dataclass
class PythonBlock:
    doc: str
    line: int
    source: str


@dataclass
class DocExamples:
    commands: list[Command] = field(default_factory=list)
    python: list[PythonBlock] = field(default_factory=list)


def _command_argv(text: str) -> list[str] | None:
    text = text.strip()
    if text.startswith("$ "):
        text = text[2:]
    if "amp-attention " not in text or text.startswith("amp-attention:"):
        return None
    text = text[text.index("amp-attention "):]
    if text.split()[1].endswith(":") or PLACEHOLDER.search(text):
        return None
    text = text.split("#", 1)[0]  # a trailing shell comment
    return shlex.split(text)


#: a Python line documented to raise: ``call(...)   # SomeError: message (...) rest``
RAISES = re.compile(r"^(?P<code>\S.*?)\s+#\s*(?P<exc>[A-Z]\w*(?:Error|Exception)):\s*(?P<msg>.*)$")


def expect_raise(line: str) -> str:
    """A line documented as raising becomes a check that it raises that exception with
    that message ("(...)" in the documented message stands for any text)."""
    m = RAISES.match(line)
    if m is None:
        return line
    parts = [p.strip() for p in m.group("msg").split("(...)") if p.strip()]
    return (f"try:\n    {m.group('code')}\nexcept {m.group('exc')} as _exc:\n"
            f"    _pos = 0\n    for _part in {parts!r}:\n"
            f"        _pos = str(_exc).index(_part, _pos) + len(_part)\n"
            f"else:\n    raise AssertionError('documented to raise {m.group('exc')}')")


def extract(doc: str) -> DocExamples:
    """The commands and Python blocks of one document (path relative to the repo)."""
    source = (ROOT / doc).read_text()
    out = DocExamples()
    fence = re.compile(r"^```(\w*)\s*$")
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        m = fence.match(lines[i])
        if not m:
            # a paragraph of prose: inline spans may wrap onto the next line
            j = i
            while j < len(lines) and not fence.match(lines[j]) and lines[j].strip():
                j += 1
            para = "\n".join(lines[i:j])
            for span in re.finditer(r"`(amp-attention [^`]+)`", para):
                argv = _command_argv(span.group(1).replace("\n", " "))
                if argv and any(a.startswith("--") for a in argv):
                    out.commands.append(Command(doc, i + 1 + para.count("\n", 0, span.start()),
                                                argv))
            i = max(j, i + 1)
            continue
        kind, start = m.group(1), i + 1
        j = start
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[start:j]
        if kind == "python":
            body = [expect_raise(line) for line in body]
            out.python.append(PythonBlock(doc, start + 1, "\n".join(body) + "\n"))
        elif kind in ("", "sh", "console", "bash", "shell"):
            k = 0
            while k < len(body):
                text, first = body[k], k
                while text.rstrip().endswith("\\") and k + 1 < len(body):
                    k += 1
                    text = text.rstrip()[:-1] + " " + body[k].strip()
                argv = _command_argv(text)
                if argv:
                    cmd = Command(doc, start + first + 1, argv)
                    nxt = body[k + 1] if k + 1 < len(body) else ""
                    if text.strip().startswith("$ ") and " error: " in nxt:
                        cmd.expected_error = nxt.strip()
                    out.commands.append(cmd)
                k += 1
        i = j + 1
    return out


def help_examples() -> list[Command]:
    """The worked examples ending every ``--help`` (amp_attention.cli.examples)."""
    from amp_attention.cli.examples import EXAMPLES

    return [Command(f"--help of {name}", 0, shlex.split(line))
            for name, items in EXAMPLES.items() for line, _ in items]


def all_examples(docs=DOCS) -> tuple[list[Command], list[PythonBlock]]:
    commands, blocks = [], []
    for doc in docs:
        ex = extract(doc)
        commands += ex.commands
        blocks += ex.python
    return commands + help_examples(), blocks


def prepare_fixtures(cwd: Path) -> None:
    """Files the examples read: key matrices for ``heads hdi``, the spectrum of a custom
    target (README.md writes it with printf before its ``--target-file`` example)."""
    import numpy as np

    rng = np.random.default_rng(0)
    stack = rng.standard_normal((4, 16, 2))
    np.save(cwd / "stack.npy", stack)
    np.save(cwd / "wk.npy", np.concatenate([w.T for w in stack], axis=0))  # (H d_k, d_model)
    (cwd / "s0.txt").write_text("0\n0\n0.5\n1\n1.5\n2\n")


def normalise_error(line: str) -> str:
    """A documented error line without what depends on the machine (free memory)."""
    return re.sub(r"[\d.]+ GiB are available", "N GiB are available", line)


def run_command(cmd: Command, cwd: Path, timeout: float | None = None) -> dict:
    exe = Path(sys.executable).with_name("amp-attention")
    argv = [str(exe) if exe.exists() else "amp-attention", *cmd.argv[1:]]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"still running after {timeout} s", "seconds": timeout}
    seconds = time.perf_counter() - t0
    err = proc.stderr.strip().splitlines()
    if cmd.expected_error is not None:
        ok = (proc.returncode == 2 and bool(err)
              and normalise_error(err[-1]) == normalise_error(cmd.expected_error))
        why = "" if ok else (f"exit {proc.returncode}, stderr {err[-1:] or ''} instead of the "
                             f"documented {cmd.expected_error!r}")
    else:
        ok = proc.returncode == 0
        why = "" if ok else f"exit {proc.returncode}: {' | '.join(err[-3:])}"
    if "Traceback" in proc.stderr:
        ok, why = False, "traceback: " + " | ".join(err[-3:])
    return {"ok": ok, "why": why, "seconds": seconds}


def run_python(blocks: list[PythonBlock], cwd: Path) -> list[dict]:
    """Run the blocks of each document in order in one namespace (in ``cwd``)."""
    import matplotlib

    matplotlib.use("Agg")
    results, namespaces = [], {}
    old = Path.cwd()
    try:
        import os

        os.chdir(cwd)
        for block in blocks:
            ns = namespaces.setdefault(block.doc, {"__name__": "__docs__"})
            t0 = time.perf_counter()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(block.source, f"{block.doc}:{block.line}", "exec"), ns)
                results.append({"ok": True, "why": "", "seconds": time.perf_counter() - t0})
            except Exception:  # noqa: BLE001 - reported, the check fails
                results.append({"ok": False, "why": traceback.format_exc(limit=3).strip()
                                .splitlines()[-1], "seconds": time.perf_counter() - t0})
    finally:
        os.chdir(old)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, help="documents to check")
    ap.add_argument("--list", action="store_true", help="list the examples, run nothing")
    ap.add_argument("--no-help-examples", action="store_true")
    ap.add_argument("--json", default=None, help="write the results to this file")
    args = ap.parse_args(argv)
    docs = tuple(args.only) if args.only else DOCS
    commands, blocks = all_examples(docs)
    if args.no_help_examples:
        commands = [c for c in commands if not c.doc.startswith("--help")]
    if args.list:
        for c in commands:
            print(f"{c.doc}:{c.line}: {c.text}" + (f"  -> {c.expected_error}"
                                                   if c.expected_error else ""))
        for b in blocks:
            print(f"{b.doc}:{b.line}: python block ({len(b.source.splitlines())} lines)")
        return 0
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="amp-docs-") as tmp:
        cwd = Path(tmp)
        for c in commands:
            # one directory per document (and per --help): examples of different
            # documents may use the same --out for different parameters
            doc_dir = cwd / re.sub(r"[^A-Za-z0-9]+", "_", c.doc.split(":")[0]).strip("_")
            if not doc_dir.exists():
                doc_dir.mkdir()
                prepare_fixtures(doc_dir)
            r = run_command(c, doc_dir)
            rows.append({"where": f"{c.doc}:{c.line}", "what": c.text, **r})
            failed += not r["ok"]
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['seconds']:7.1f} s  {c.doc}:{c.line}: "
                  f"{c.text}" + (f"\n      {r['why']}" if r["why"] else ""), flush=True)
        for b, r in zip(blocks, run_python(blocks, cwd / "python")
                        if (cwd / "python").mkdir() is None else []):
            rows.append({"where": f"{b.doc}:{b.line}", "what": "python block", **r})
            failed += not r["ok"]
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['seconds']:7.1f} s  {b.doc}:{b.line}: "
                  f"python block" + (f"\n      {r['why']}" if r["why"] else ""), flush=True)
    total = sum(r["seconds"] for r in rows)
    print(f"docs check: {len(rows) - failed} of {len(rows)} examples ok, {failed} failed, "
          f"{total:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
