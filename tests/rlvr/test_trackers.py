"""Experiment trackers (``log.report_to``, `rlvr.trackers`): each with its real package, offline
(W&B's offline mode, MLflow's local file store, Trackio's local SQLite store), read back with the
package's own tools after one short training run that reports to all of them; and the one-line
refusals of a tracker that cannot start, and the containment of one that fails mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.trackers import TRACKERS, TrackedRun, Tracker, TrackerError, Trackers, register
from rlvr.train.recipes import load_run_config
from tests.forked import run_forked

REPO = Path(__file__).resolve().parents[2]


def tracked_run(tmp_path: Path) -> TrackedRun:
    return TrackedRun(name="run", project="rlvr-test", run_dir=tmp_path / "run", config={"log": {"project": "rlvr-test"}, "seed": 0},
                      provenance={"code": {"commit": "abc"}, "libraries": {"rlvr": "0"}})


def test_an_unknown_or_repeated_tracker_is_refused_when_the_config_loads():
    with pytest.raises(TrackerError, match=r"unknown tracker 'wandbb' \(did you mean 'wandb'\?"):
        load_run_config("quickstart", ["log.report_to=[tensorboard,wandbb]"])
    with pytest.raises(TrackerError, match="'mlflow' is listed twice"):
        load_run_config("quickstart", ["log.report_to=[mlflow,mlflow]"])
    assert load_run_config("quickstart", ["log.report_to=mlflow"]).log.trackers == ["mlflow"]
    assert load_run_config("quickstart", []).log.trackers == ["tensorboard"]  # the default
    assert load_run_config("quickstart", ["log.tensorboard=false"]).log.trackers == []


def test_a_tracker_that_is_not_installed_is_one_line_naming_it_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as it does where wandb is not installed
    with pytest.raises(TrackerError) as caught:
        Trackers.open(["tensorboard", "wandb"], tracked_run(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("log.report_to: wandb is not installed: pip install wandb") and "leave wandb out of log.report_to" in message


def test_a_tracker_with_bad_settings_is_one_line_naming_it_and_the_fix(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    # mlflow 3 refuses a file store unless MLFLOW_ALLOW_FILE_STORE opts in
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(TrackerError) as caught:
        Trackers.open(["mlflow"], tracked_run(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("log.report_to: mlflow could not start (MlflowException: ")
    assert "MLFLOW_TRACKING_URI" in message and "leave mlflow out of log.report_to" in message


def test_wandb_without_a_login_is_one_line_naming_the_ways_to_log_in_or_go_offline(tmp_path):
    pytest.importorskip("wandb")
    # a process of its own: wandb keeps its settings per process; a fresh HOME holds no login
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")} | {"HOME": str(tmp_path), "WANDB_DIR": str(tmp_path)}
    script = ("import sys; from pathlib import Path; from rlvr.trackers import Trackers, TrackedRun, TrackerError\n"
              "try:\n    Trackers.open(['wandb'], TrackedRun('run', 'rlvr-test', Path(sys.argv[1]), {}, {}))\n"
              "except TrackerError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("REFUSED")]
    assert line.startswith("REFUSED log.report_to: wandb could not start (UsageError: No API key configured)"), out.stdout + out.stderr
    assert "`wandb login`" in line and "WANDB_MODE=offline" in line


def test_the_harness_refuses_the_run_before_anything_loads_and_leaves_no_run_directory(tmp_path, monkeypatch):
    from rlvr.train import train

    monkeypatch.setitem(sys.modules, "wandb", None)
    cfg = load_run_config("quickstart", [f"output_dir={tmp_path}", "name=run", "model.name_or_path=no/such-model", "log.progress=false",
                                         "threads=1", "log.report_to=[tensorboard,wandb]"])
    with pytest.raises(TrackerError, match="wandb is not installed"):
        train(cfg)  # the model named does not exist: the tracker is refused first
    assert not (tmp_path / "run").exists()  # not even the tb/ folder the tracker before wandb started


class _Failing(Tracker):
    """A tracker plugin whose service goes away after it starts."""

    name = "failing-test-tracker"
    install = "nothing"

    def start(self, run: TrackedRun) -> None:
        self.finished = False

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        raise ConnectionError(f"service unreachable at step {step}")

    def log_report(self, step: int, name: str, report: dict, path: Path) -> None:
        raise ConnectionError("service unreachable")

    def finish(self, status: str) -> None:
        self.finished = True


def test_a_tracker_that_fails_mid_run_is_counted_and_warned_once_and_the_others_go_on(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setitem(TRACKERS, _Failing.name, _Failing)
    printed: list[str] = []
    trackers = Trackers.open(["failing-test-tracker", "tensorboard"], tracked_run(tmp_path), print=printed.append)
    for step in (1, 2, 3):
        trackers.log_metrics(step, {"reward/mean": step / 10, "skipped": float("nan"), "note": "text"})
    failing = trackers.trackers[0]
    trackers.finish("completed")
    assert failing.finished
    assert trackers.failures == {"failing-test-tracker": 3}
    assert len(printed) == 2, printed  # the first failure, and the count at the end
    assert printed[0].startswith("warning: tracker failing-test-tracker failed in log_metrics: ConnectionError: service unreachable at step 1")
    assert "3 call(s) failed" in printed[1]
    events = EventAccumulator(str(tmp_path / "run" / "tb"))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("reward/mean")] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert events.Tags()["scalars"] == ["reward/mean"]  # the NaN and the text are left out


def test_a_tracker_whose_server_does_not_answer_is_refused_in_one_line_naming_it_and_the_uri(tmp_path, monkeypatch):
    import socket

    pytest.importorskip("mlflow")
    server = socket.socket()  # a real server on 127.0.0.1 that accepts and never answers
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    uri = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for key in ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")  # the user's own setting is kept
    try:
        with pytest.raises(TrackerError) as caught:
            Trackers.open(["mlflow"], tracked_run(tmp_path), start_timeout_s=1)
    finally:
        server.close()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"log.report_to: mlflow did not start within 1 s (at {uri})") and "leave mlflow out of log.report_to" in message
    # mlflow itself gives up in seconds, not after minutes of retries, unless told otherwise
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2" and os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"


def test_trackio_with_a_folder_it_cannot_write_is_refused_in_one_line(tmp_path):
    pytest.importorskip("trackio")
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a folder under a file cannot be made, whoever runs the test
    env = os.environ | {"TRACKIO_DIR": str(blocked / "trackio"), "HF_HUB_OFFLINE": "1"}
    script = ("import sys; from pathlib import Path; from rlvr.trackers import Trackers, TrackedRun, TrackerError\n"
              "try:\n    Trackers.open(['trackio'], TrackedRun('run', 'rlvr-test', Path(sys.argv[1]), {}, {}))\n"
              "except TrackerError as e:\n    print('REFUSED', e)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("REFUSED")]
    assert line.startswith(f"REFUSED log.report_to: trackio could not start (OSError: TRACKIO_DIR {blocked / 'trackio'} is not a writable folder"), out.stdout + out.stderr
    assert "leave trackio out of log.report_to" in line


class _Hanging(Tracker):
    """A tracker plugin whose server stops answering after it starts."""

    name = "hanging-test-tracker"
    install = "nothing"

    def start(self, run: TrackedRun) -> None:
        import threading

        self.release, self.answered, self.logged = threading.Event(), threading.Event(), []

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.release.wait()
        self.logged.append(step)
        self.answered.set()

    def log_report(self, step: int, name: str, report: dict, path: Path) -> None:
        pass

    def finish(self, status: str) -> None:
        pass


def test_a_tracker_call_that_does_not_return_is_left_behind_counted_and_warned_once(tmp_path, monkeypatch):
    monkeypatch.setitem(TRACKERS, _Hanging.name, _Hanging)
    printed: list[str] = []
    trackers = Trackers.open([_Hanging.name], tracked_run(tmp_path), print=printed.append, call_timeout_s=0.2)
    hanging = trackers.trackers[0]
    for step in (1, 2, 3):  # the first call does not return: it and the two skipped after it are counted
        trackers.log_metrics(step, {"reward/mean": 0.5})
    assert trackers.failures == {_Hanging.name: 3} and hanging.logged == []
    hanging.release.set()
    assert hanging.answered.wait(60)
    trackers._busy[_Hanging.name].join(60)
    trackers.log_metrics(4, {"reward/mean": 0.5})  # answering again: logged
    trackers.finish("completed")
    assert hanging.logged == [1, 4] and trackers.failures == {_Hanging.name: 3}
    assert len(printed) == 2, printed
    assert printed[0] == f"warning: tracker {_Hanging.name} failed in log_metrics: no answer within 0.2 s (the run goes on; further failures are counted)"
    assert "3 call(s) failed" in printed[1]


# -- one short run reporting to every tracker, read back from each store ---------------------------


def _wandb_records(wandb_dir: Path) -> list[dict]:
    """The offline run's records, read with wandb's own inspector (`wandb leet inspect --json`)."""
    (log,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    out = subprocess.run([str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(log)],
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_one_run_reports_metrics_config_provenance_and_eval_reports_to_every_tracker_offline(sft_base, tmp_path, rl_overrides):
    for package in ("wandb", "mlflow", "trackio"):
        pytest.importorskip(package)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "WANDB_SILENT": "true",
           "MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true",
           "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    (tmp_path / "wandb").mkdir()
    args = rl_overrides(tmp_path, sft_base, "update.steps=2", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=24",
                        "eval.every=2", "eval.at_start=false", "eval.limit=8", "log.checkpoint_every=0", "log.plot=false",
                        "log.project=rlvr-test", "log.report_to=[tensorboard,wandb,mlflow,trackio]")
    proc = run_forked(["train", "quickstart", *args], env, timeout=1200, cwd=REPO)  # (a process of its own, without a new interpreter's imports)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "warning: tracker" not in proc.stdout + proc.stderr
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    numbers = [{k: v for k, v in r.items() if isinstance(v, (int, float)) and k not in ("step", "time")} for r in rows]
    logged = set().union(*numbers)
    assert {"reward/mean", "eval/accuracy"} <= logged
    report = json.loads((run / "reports" / "eval-step-2.json").read_text())
    assert report["greedy"]["accuracy"] == rows[-1]["eval/accuracy"]
    assert report["model"] == f"{run.resolve()} at step 2"  # which weights: the run's policy at that step
    commit = json.loads((run / "provenance.json").read_text())["code"]["commit"]

    # W&B: the offline run's history, config (with the provenance) and the report file
    records = _wandb_records(tmp_path / "wandb")
    history = {r["history"]["item"]["_step"]: r["history"]["item"] for r in records if r.get("type") == "history"}
    assert sorted(history) == [1, 2]
    for row, values in zip(rows, numbers):
        assert {k: history[row["step"]][k] for k in values} == pytest.approx(values)
    (config,) = [r["run"]["config"]["update"] for r in records if r.get("type") == "run"]
    assert config["log"]["report_to"] == ["tensorboard", "wandb", "mlflow", "trackio"] and config["provenance"]["code"]["commit"] == commit
    assert json.loads((next((tmp_path / "wandb").glob("wandb/offline-run-*/files")) / "reports" / "eval-step-2.json").read_text()) == report
    summaries = [r["summary"]["update"] for r in records if r.get("type") == "summary"]
    assert [u["eval/report"] for u in summaries if "eval/report" in u] == [report]

    # MLflow: the local file store, read with MlflowClient
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # (this process reads the store the run wrote)
    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    (mlrun,) = client.search_runs([client.get_experiment_by_name("rlvr-test").experiment_id])
    assert mlrun.info.status == "FINISHED" and mlrun.info.run_name == "run"
    for key in logged:
        assert [(m.step, m.value) for m in client.get_metric_history(mlrun.info.run_id, key)] == \
               [(r["step"], pytest.approx(v[key])) for r, v in zip(rows, numbers) if key in v], key
    assert mlrun.data.params["algo.preset"] == "grpo" and mlrun.data.tags["rlvr.commit"] == str(commit)
    artifacts = Path(client.download_artifacts(mlrun.info.run_id, "", str(tmp_path / "mlflow-artifacts")))
    assert json.loads((artifacts / "provenance.json").read_text())["code"]["commit"] == commit
    assert json.loads((artifacts / "config.json").read_text())["log"]["project"] == "rlvr-test"
    assert json.loads((artifacts / "reports" / "eval-step-2.json").read_text()) == report

    # Trackio: the local SQLite store under TRACKIO_DIR, read with trackio's storage API in a
    # process of its own (trackio reads TRACKIO_DIR when it is imported)
    read = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps({'logs': S.get_logs('rlvr-test', 'run'), 'config': S.get_run_config('rlvr-test', 'run')}, default=str))")
    out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=300, check=True)
    stored = json.loads(out.stdout.strip().splitlines()[-1])
    by_step: dict[int, dict] = {}
    for entry in stored["logs"]:
        by_step.setdefault(entry["step"], {}).update(entry)
    for row, values in zip(rows, numbers):
        assert {k: by_step[row["step"]][k] for k in values} == pytest.approx(values)
    assert "eval/report" in by_step[2]
    assert stored["config"]["provenance"]["code"]["commit"] == commit and stored["config"]["algo"]["preset"] == "grpo"

    # TensorBoard, the default, still gets the metrics
    assert list((run / "tb").glob("events.out.tfevents.*"))
