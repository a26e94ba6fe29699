"""`rlvr eval --env-kwargs`: the environment's settings (the math extraction mode) are selectable
and recorded in the report."""

import json

import pytest

from rlvr.cli import main


def test_env_kwargs_must_be_a_mapping(capsys):
    assert main(["eval", "--model", "x", "--task", "arithmetic-v1", "--env-kwargs", "[1, 2]"]) == 2
    assert "--env-kwargs must be a mapping" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_uses_and_records_the_extraction_mode(sft_base, tmp_path):
    out = tmp_path / "report"
    argv = ["eval", "--model", str(sft_base), "--task", "arithmetic-v1", "--limit", "5", "--max-new-tokens", "48",
            "--out", str(out), "--env-kwargs", "{extraction: lenient}"]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["task"]["env_kwargs"] == {"extraction": "lenient"}
