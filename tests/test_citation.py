"""For people who cite and reuse the work (issue 57): a BSD-3-Clause LICENSE, a
CITATION.cff naming the software and the paper, and ``python -m amp_attention`` as the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_license_is_bsd_3_clause() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder" in text  # the third clause


def test_citation_file_has_the_required_fields_and_the_paper() -> None:
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    top = {m.group(1) for m in re.finditer(r"^([a-z-]+):", text, flags=re.M)}
    # CFF 1.2.0's required keys, and the paper as the preferred citation
    assert {"cff-version", "message", "title", "authors", "preferred-citation"} <= top
    assert re.search(r"^cff-version: 1\.2\.0$", text, flags=re.M)
    assert "arXiv:2509.24914" in text and "license: BSD-3-Clause" in text
    assert "\t" not in text  # YAML: spaces only


def test_python_m_amp_attention_is_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "amp_attention", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: amp-attention")
    bad = subprocess.run([sys.executable, "-m", "amp_attention", "se", "--alpha", "-1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "alpha" in bad.stderr
