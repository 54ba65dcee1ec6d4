"""README's set-up commands, .ci/run and the checkout import of amp_attention.solvers.

A new user's first command is the README's; CI must run exactly that (issue 29, item 0:
CI's editable install hid a failure of the README's non-editable one)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from amp_attention._checkout import checkout_solvers_folder

ROOT = Path(__file__).resolve().parents[1]


def readme_setup_commands() -> list[str]:
    """The command lines of the sh blocks of README.md's "Set-up" section."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Set-up\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md has no '## Set-up' section"
    blocks = re.findall(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
    return [ln for b in blocks for ln in b.splitlines() if ln.strip()]


def ci_commands() -> dict[str, str]:
    text = (ROOT / ".ci/run").read_text()
    return dict(re.findall(r"^(README_\w+_CMD)='([^']*)'$", text, re.M))


def test_readme_has_exactly_two_setup_commands() -> None:
    cmds = readme_setup_commands()
    assert len(cmds) == 2, cmds
    main, tests = cmds
    assert main.endswith("amp-attention quickstart"), main
    assert tests.endswith("python -m pytest -q"), tests
    for c in cmds:
        assert c.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")
        assert " -e " not in c and "--editable" not in c


def test_ci_runs_the_readme_commands_verbatim() -> None:
    """Fails as soon as README.md and .ci/run drift apart."""
    main, tests = readme_setup_commands()
    ci = ci_commands()
    assert ci == {"README_MAIN_CMD": main, "README_TEST_CMD": tests}
    script = (ROOT / ".ci/run").read_text()
    # executed as written (bash -c on the very string), never a variant of it
    assert 'bash -c "$README_MAIN_CMD"' in script
    assert 'bash -c "$README_TEST_CMD"' in script
    code = [ln for ln in script.splitlines() if not ln.lstrip().startswith("#")]
    assert not any(re.search(r"pip install .*(-e|--editable)\b", ln) for ln in code)
    assert not any(re.search(r"\bpytest\b", ln) for ln in code
                   if "README_TEST_CMD" not in ln and "pytest collected" not in ln)


def test_checkout_maps_solvers_without_site_packages() -> None:
    """What ``python -m pytest`` from the root does to the import path: the checkout's
    amp_attention/ comes first.  With site-packages off (-S: no installed or editable copy
    to fall back on) amp_attention.solvers must still resolve, to the top-level folder."""
    assert _solvers_origin_from_the_root("") == ROOT / "solvers" / "__init__.py"


def _solvers_origin_from_the_root(prelude: str) -> Path:
    """Where amp_attention.solvers resolves from the checkout's root with site-packages off
    (-S), after ``prelude`` ran."""
    code = (prelude + "import importlib.util\n"
            "s = importlib.util.find_spec('amp_attention.solvers')\n"
            "print(s.origin if s else None)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def test_checkout_solvers_win_over_another_checkouts_editable_install(tmp_path: Path) -> None:
    """An editable install of another checkout registers, at start-up, a meta-path finder
    for amp_attention.solvers pointing at its own solvers/; importing this checkout's
    amp_attention must still pair it with this checkout's solvers/ (a mix of two versions
    is what a benchmark against a second worktree would otherwise measure)."""
    other = tmp_path / "other_solvers"
    other.mkdir()
    (other / "__init__.py").write_text("")
    code = ("import importlib.abc, importlib.util, sys\n"
            "class Other(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name != 'amp_attention.solvers': return None\n"
            f"        return importlib.util.spec_from_file_location(name, {str(other / '__init__.py')!r},"
            f" submodule_search_locations=[{str(other)!r}])\n"
            "sys.meta_path.append(Other())\n")
    assert _solvers_origin_from_the_root(code) == ROOT / "solvers" / "__init__.py"


def _tree(base: Path, files: list[str]) -> None:
    for f in files:
        p = base / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")


def test_checkout_detection(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    _tree(checkout, ["pyproject.toml", "amp_attention/__init__.py", "solvers/__init__.py"])
    assert checkout_solvers_folder(str(checkout / "amp_attention")) == str(checkout / "solvers")
    # an installed copy carries amp_attention/solvers/: nothing to map
    site = tmp_path / "site-packages"
    _tree(site, ["amp_attention/__init__.py", "amp_attention/solvers/__init__.py",
                 "solvers/__init__.py"])
    assert checkout_solvers_folder(str(site / "amp_attention")) is None
    # another distribution's top-level solvers beside a (broken) install is never taken
    other = tmp_path / "other"
    _tree(other, ["amp_attention/__init__.py", "solvers/__init__.py"])
    assert checkout_solvers_folder(str(other / "amp_attention")) is None
