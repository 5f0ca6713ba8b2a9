"""The exit codes README.md promises, with the real command: 2 for bad input, 3 for files
the harness could not write, with a message naming what; never a traceback (exit 1), never
silence (exit 0) (docs/RELIABILITY.md, "Bad input and faults, third probe (issue 49)")."""

from __future__ import annotations

import json

import pytest

from tests.kit import harness_cli


def said(result) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result.stderr


def test_a_golden_whose_cache_is_a_file_is_exit_3_naming_it(tmp_path):
    """Issue 49, item 8: `HARNESS_CACHE=/some/file harness golden SUITE` ended in a
    NotADirectoryError traceback from the zoo's model_dir, exit 1."""
    cache = tmp_path / "a-file"
    cache.write_text("")
    result = harness_cli("golden", "llama-tiny", "--work-dir", str(tmp_path / "work"),
                         env={"HARNESS_CACHE": str(cache), "HARNESS_GOLDEN_DIR": str(tmp_path / "golden")})
    assert result.returncode == 3, result.stdout + result.stderr
    err = said(result)
    assert f"golden llama-tiny not made: the harness could not write its files: [Errno 20] Not a directory: '{cache}/" in err


@pytest.mark.parametrize("out", ["/dev/full", "missing/dir/x.json"])
def test_durations_that_cannot_be_written_are_exit_3_naming_the_file(tmp_path, out):
    """Issue 49, item 8: `harness durations --out /dev/full` (or into a missing directory)
    ended in an OSError / FileNotFoundError traceback, exit 1."""
    target = out if out.startswith("/") else str(tmp_path / out)
    (tmp_path / "reports").mkdir()
    result = harness_cli("durations", "--report-dir", str(tmp_path / "reports"), "--out", target)
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"harness: could not write the durations file {target}: " in said(result)


def test_durations_are_written_as_before(tmp_path):
    (tmp_path / "reports").mkdir()
    result = harness_cli("durations", "--report-dir", str(tmp_path / "reports"), "--out", str(tmp_path / "d.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "d.json").read_text()) == {}
