"""`rlvr tasks freeze` on a plugin's task (issue 22): the split is written into the plugin's own
package (or a folder the user names), never into rlvr's tree, and the task reads it from there.
The plugin is installed into a scratch site folder and found through its entry points, in child
processes, as a real installed plugin would be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tasks.procedural import DATA_DIR
from tests.plugins import install_acme

REPO = Path(__file__).resolve().parents[2]


def run(site: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


READ = ("import json, tasks; t = tasks.make('acme/sums-v1'); "
        "print(json.dumps({'checksum': t.checksum('test'), 'first': t.get('test', 0).prompt}))")


def _record_and_read(site, checksum: str, cwd, extra: str = "") -> str:
    """Record ``checksum`` (and ``extra`` class lines) in the plugin's task, as `rlvr tasks freeze`
    tells its author to; returns the checksum of the test split the task then serves."""
    module = site / "acme_rlvr" / "sums.py"
    module.write_text(module.read_text().replace("frozen = {}", f"frozen = {{'test': {checksum!r}}}{extra}"))
    read = run(site, "-c", READ, cwd=cwd)
    assert read.returncode == 0, read.stderr
    return json.loads(read.stdout)["checksum"]


def test_freezing_a_plugin_task_writes_into_the_plugin_and_the_task_reads_it_there(tmp_path):
    site = install_acme(tmp_path / "site")
    out = run(site, "-m", "rlvr.cli", "tasks", "freeze", "acme/sums-v1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    frozen = site / "acme_rlvr" / "data" / "acme" / "sums-v1" / "test.jsonl"
    assert f"wrote {frozen}" in out.stdout and len(frozen.read_text().splitlines()) == 6
    assert not (DATA_DIR / "acme").exists()  # rlvr's own tree is untouched
    checksum = out.stdout.split("checksum ")[1].split()[0]

    # the plugin records the checksum, as the command says; the task then serves the frozen file
    assert _record_and_read(site, checksum, tmp_path) == checksum
    frozen.write_text(frozen.read_text().replace('"prompt": "', '"prompt": "edited ', 1))  # proof the file is what is read
    assert "has checksum" in run(site, "-c", READ, cwd=tmp_path).stderr


def test_freeze_out_writes_where_the_user_says_and_frozen_dir_reads_it(tmp_path):
    site = install_acme(tmp_path / "site")
    out = run(site, "-m", "rlvr.cli", "tasks", "freeze", "acme/sums-v1", "--out", str(tmp_path / "mine"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    frozen = tmp_path / "mine" / "acme" / "sums-v1" / "test.jsonl"
    assert frozen.is_file() and not (site / "acme_rlvr" / "data").exists() and not (DATA_DIR / "acme").exists()
    assert f"set SumsTask.frozen_dir = {str(tmp_path / 'mine')!r}" in out.stdout
    checksum = out.stdout.split("checksum ")[1].split()[0]
    assert _record_and_read(site, checksum, tmp_path, f"\n    frozen_dir = {str(tmp_path / 'mine')!r}") == checksum
