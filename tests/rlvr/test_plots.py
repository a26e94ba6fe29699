"""Training curves (`rlvr.plots`): the PNG a run writes, drawn without touching matplotlib's global
backend (a notebook that trains keeps showing its own plots inline)."""

from __future__ import annotations

import json

import matplotlib

from rlvr.plots import DEFAULT_PANELS, draw_metrics, plot_metrics

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


def test_no_panels_labels_overlap_anothers_or_leave_the_figure_with_wide_tick_labels():
    """The panels sit in fixed margins (no tight_layout, which measured every label at every checkpoint): even
    with the widest tick labels a run writes (six-digit counts, negative fractions) and a title, no panel's title,
    tick labels or axis label reaches into another panel or out of the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    keys = [k for _, ks, _ in DEFAULT_PANELS for k in ks]
    rows = [{"step": s, **{k: (-0.00123 if i % 2 else 123456.0) * (1 + s / 10) for i, k in enumerate(keys)}} for s in range(1, 40)]
    for panels in (len(keys), 3, 1):
        fig = draw_metrics([{"step": r["step"], **{k: r[k] for k in keys[:panels]}} for r in rows], title="a run/with a long title")
        renderer = FigureCanvasAgg(fig).get_renderer()
        boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible() and ax.axison]
        width, height = fig.bbox.width, fig.bbox.height
        assert all(b.x0 >= 0 and b.y0 >= 0 and b.x1 <= width and b.y1 <= height for b in boxes), [b.bounds for b in boxes]
        assert not [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[i + 1:], i + 1) if a.overlaps(b)], panels
