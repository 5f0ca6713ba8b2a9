"""A damaged golden is the golden's fault, not the engine's: never an engine `fail`.

Through the real CLI: a copy of the committed llama-tiny golden with bytes flipped in
the middle of its tensor data (header intact), or cut short, must end as `error`
naming the file and how to restore it, before any rank is launched; the intact copy
still passes (the committed goldens carry digests of their files)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from harness.contract.rundir import logs_dir, verdict_path
from tests.kit import ROOT, harness_cli, verdict_of

pytestmark = pytest.mark.e2e
SCENARIO = "llama-tiny/tp1-pp1"


def corrupt_tensor_data(path: Path) -> None:
    """Overwrite 8 bytes in the middle of the tensor data, leaving the header readable."""
    blob = bytearray(path.read_bytes())
    data_start = 8 + struct.unpack("<Q", blob[:8])[0]
    middle = data_start + (len(blob) - data_start) // 2
    blob[middle : middle + 8] = b"\x7f" * 8  # float32 0x7f7f7f7f: 3.4e38, read as "|delta| 3.4e+38" before goldens had digests
    path.write_bytes(bytes(blob))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def run_against(golden: Path, tmp_path: Path) -> dict:
    result = harness_cli(
        "run", SCENARIO, "--report-dir", str(tmp_path / "reports"), "--run-id", "r", env={"HARNESS_GOLDEN_DIR": str(golden)}
    )
    assert verdict_path(tmp_path / "reports" / "r", SCENARIO).exists(), result.stdout + result.stderr
    return verdict_of(tmp_path / "reports" / "r", SCENARIO)


@pytest.mark.parametrize("damage", [corrupt_tensor_data, truncate], ids=["bytes-flipped", "truncated"])
def test_a_damaged_golden_is_an_error_naming_the_file(tmp_path, damage):
    golden = tmp_path / "golden"
    shutil.copytree(ROOT / "golden" / "llama-tiny", golden / "llama-tiny")
    damaged = golden / "llama-tiny" / "outputs.safetensors"
    damage(damaged)
    v = run_against(golden, tmp_path)
    assert v["verdict"] == "error", v["reason"]
    assert str(damaged) in v["reason"] and "damaged" in v["reason"], v["reason"]
    assert "git checkout golden/llama-tiny" in v["reason"] and "harness golden llama-tiny" in v["reason"]
    assert not logs_dir(tmp_path / "reports" / "r", "llama-tiny/tp1-pp1").exists()  # no launch


def test_the_intact_committed_golden_still_passes(tmp_path):
    golden = tmp_path / "golden"
    shutil.copytree(ROOT / "golden" / "llama-tiny", golden / "llama-tiny")
    v = run_against(golden, tmp_path)
    assert v["verdict"] == "pass", v["reason"]


def test_a_manifest_that_is_json_but_not_an_object_is_an_error_naming_it(tmp_path):
    """It used to end the whole run: "harness error: AttributeError: 'list' object has no
    attribute 'get'", without the file's name."""
    golden = tmp_path / "golden"
    shutil.copytree(ROOT / "golden" / "llama-tiny", golden / "llama-tiny")
    manifest = golden / "llama-tiny" / "manifest.json"
    manifest.write_text("[]")
    v = run_against(golden, tmp_path)
    assert v["verdict"] == "error", v["reason"]
    assert str(manifest) in v["reason"] and "a JSON object" in v["reason"], v["reason"]
    assert "git checkout golden/llama-tiny" in v["reason"]
