"""Shared fixtures. `sft_base` builds the embedded model exactly as the quickstart does (about 2-3
minutes on one core) once per test session; every training and evaluation test starts from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def sft_base(tmp_path_factory) -> Path:
    if os.environ.get("RLVR_TEST_SFT_BASE"):  # iterate on training tests with a base built once (rlvr sft sft_quickstart)
        return Path(os.environ["RLVR_TEST_SFT_BASE"])
    from rlvr.config import load_config
    from rlvr.train.sft import SFTConfig, sft

    out = tmp_path_factory.mktemp("sft")
    cfg = load_config(SFTConfig, "sft_quickstart", [f"output_dir={out}", "name=base", "log.progress=false", "log.tensorboard=false", "threads=1"])
    return sft(cfg)


@pytest.fixture
def rl_overrides():
    """Overrides of the quickstart RL config: write into a folder, quiet, one thread."""

    def make(out: Path, base: Path, *extra: str) -> list[str]:
        return [f"output_dir={out}", "name=run", f"model.name_or_path={base}", "log.progress=false", "threads=1", *extra]

    return make
