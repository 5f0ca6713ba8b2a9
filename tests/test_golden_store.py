"""`harness golden` stores a golden safely (harness/run/golden.py): where it cannot write is said
before the run, a symlinked golden is followed (the link kept), and the old golden stays
whole until the new one is in place; what a kill between the two renames leaves is named
by the next run that misses the golden."""

from __future__ import annotations

import os

import pytest

from harness.cli import main
from harness.run import golden
from harness.run.golden import GoldenError, golden_place, leftover_hint


@pytest.fixture
def golden_root(tmp_path, monkeypatch):
    root = tmp_path / "golden"
    root.mkdir()
    monkeypatch.setenv("HARNESS_GOLDEN_DIR", str(root))
    monkeypatch.setenv("HARNESS_REPORTS_DIR", str(tmp_path / "reports"))
    return root


def test_a_symlink_to_a_file_is_refused_before_the_run(golden_root, tmp_path):
    (tmp_path / "a-file").write_text("x")
    (golden_root / "llama-tiny").symlink_to(tmp_path / "a-file")
    with pytest.raises(GoldenError, match="is a symlink to .*a-file, which is not a directory"):
        golden_place("llama-tiny")


def test_an_unwritable_place_is_refused_before_the_run(golden_root, monkeypatch, capsys):
    """As root every directory is writable but on a read-only mount; os.access is what says so."""
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(golden_root) else real_access(p, mode))
    with pytest.raises(GoldenError, match=f"{golden_root} is not a writable directory"):
        golden_place("llama-tiny")
    assert main(["golden", "llama-tiny"]) == 1
    err = capsys.readouterr().err
    assert "is not a writable directory" in err and "Traceback" not in err
    assert not list((golden_root.parent / "reports").rglob("rank*.log"))  # said before any rank started


@pytest.mark.e2e  # one golden run (real ranks)
def test_a_symlinked_golden_is_followed_and_a_stopped_swap_is_named(golden_root, tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "shared-goldens" / "llama-tiny"
    elsewhere.mkdir(parents=True)
    (golden_root / "llama-tiny").symlink_to(elsewhere)
    assert main(["golden", "llama-tiny"]) == 0
    assert (golden_root / "llama-tiny").is_symlink() and (elsewhere / "manifest.json").exists()

    # a kill after the old golden moved aside and before the new one moved in
    real_replace, calls = os.replace, []

    def stop_at_the_second(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", stop_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        golden.store_golden(*_stored_inputs(elsewhere))
    monkeypatch.setattr(os, "replace", real_replace)
    assert not elsewhere.exists() and (elsewhere.parent / ".llama-tiny.old" / "manifest.json").exists()
    hint = leftover_hint(elsewhere)
    assert hint and ".llama-tiny.new holds it whole" in hint and "mv " in hint


def _stored_inputs(directory):
    """A stored golden's own files as the inputs of store_golden (outputs dir, manifest)."""
    import json

    manifest = json.loads((directory / "manifest.json").read_text())
    manifest.pop("files", None)
    manifest.pop("created", None)
    return directory, manifest
