"""Training curves (`rlvr.plots`): the PNG a run writes, drawn without touching matplotlib's global
backend (a notebook that trains keeps showing its own plots inline)."""

from __future__ import annotations

import json

import matplotlib

from rlvr.plots import plot_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_curves_are_a_png_and_the_backend_is_left_as_it_was(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "reward/mean": s / 4, "eval/accuracy": 0.5}) + "\n" for s in range(1, 5)))
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # any backend other than the Agg a plotting library might force
    try:
        out = plot_metrics(metrics, tmp_path / "plots" / "metrics.png", title="run")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    assert out == tmp_path / "plots" / "metrics.png" and out.read_bytes().startswith(PNG_MAGIC)
    (tmp_path / "empty.jsonl").write_text("")
    assert plot_metrics(tmp_path / "empty.jsonl", tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
