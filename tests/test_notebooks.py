"""The notebooks of docs/notebooks/ run top to bottom and show what their text promises.

Each runs in a kernel of this environment (nbclient, ipykernel), in a fresh working folder, with the
parameters a test sets in a cell added after the notebook's ``parameters`` cell (as papermill does);
the notebooks are stored without outputs, so the repository stays small and the docs site shows code."""

from __future__ import annotations

import ast
import base64
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "docs" / "notebooks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def run(nb: nbformat.NotebookNode, folder: Path, parameters: str) -> dict[str, nbformat.NotebookNode]:
    """Execute ``nb`` in ``folder`` after setting ``parameters``; its code cells by id, with their outputs."""
    index = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(parameters, id="injected-parameters"))
    specs = folder / "kernels"  # a kernel of this very interpreter, whatever kernels the machine has installed
    (specs / "rlvr-tests").mkdir(parents=True)
    (specs / "rlvr-tests" / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rlvr tests", "language": "python"}))
    km = KernelManager(kernel_name="rlvr-tests", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]))
    work = folder / "work"
    work.mkdir()
    NotebookClient(nb, km=km, timeout=900, startup_timeout=300, resources={"metadata": {"path": str(work)}}).execute()
    return {cell.id: cell for cell in nb.cells if cell.cell_type == "code"}


def stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream" and out.name == "stdout")


def test_notebooks_are_stored_without_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert "train-a-reward-function.ipynb" in names
    for name in names:
        nb = read(name)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{name}: cell {cell.id} keeps its outputs"


@pytest.mark.slow
def test_the_reward_function_notebook_trains_evaluates_compares_and_plots(sft_base, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cells = run(read("train-a-reward-function.ipynb"), tmp_path, f"BASE_MODEL = {str(sft_base)!r}\nRL_STEPS = 2\nTHREADS = 1")
    for cell in cells.values():
        assert not [out for out in cell.outputs if out.output_type == "error"], cell.id

    assert re.search(r"Answer: 42'\s+reward=1.0 passed=True\n'Answer: 41'\s+reward=0.0 passed=False\n", stdout(cells["reward"]))
    sizes = ast.literal_eval(stdout(cells["data"]))
    assert sum(sizes.values()) == 198 and sizes["test"] > 0 and sizes["validation"] > 0
    assert f"base model: {sft_base}" in stdout(cells["base"])
    assert not (tmp_path / "work" / "runs" / "notebook" / "sft").exists()  # the given base was used, none built
    assert "\ncompleted: 2 steps in runs/notebook/grpo; final model runs/notebook/grpo/final\n" in "\n" + stdout(cells["train"])
    assert (tmp_path / "work" / "runs" / "notebook" / "grpo" / "metrics.jsonl").is_file()

    accuracies = re.fullmatch(r"test accuracy: before (\d\.\d{3}), after (\d\.\d{3})\n", stdout(cells["eval"]))
    assert accuracies, stdout(cells["eval"])
    for name in ("before", "after"):
        report = json.loads((tmp_path / "work" / "runs" / "notebook" / "eval" / name / "report.json").read_text())
        assert f"{report['greedy']['accuracy']:.3f}" == accuracies.group(1 if name == "before" else 2)
        assert report["split"] == "test" and report["greedy"]["correct"] / sizes["test"] == report["greedy"]["accuracy"]
    assert "before" in stdout(cells["compare"]) and "after" in stdout(cells["compare"])

    images = [out["data"]["image/png"] for out in cells["plot"].outputs if out.output_type == "display_data" and "image/png" in out["data"]]
    assert len(images) == 1 and base64.b64decode(images[0]).startswith(PNG_MAGIC)
