"""The asynchronous pipeline (`rlvr.rollout.asynchronous.AsyncRollouts`) driven as the trainer drives
it, on the quickstart's SFT base with a real engine and verifier: where the schedule ends, what a
checkpoint holds (queued batches, the probe and its proofs), a resume with another schedule, a
checkpoint that stalls, and a slow start-up. The runs end to end are in test_async_training.py."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from rlvr import UserError
from rlvr.models.loading import load_model
from rlvr.rollout.asynchronous import AsyncRollouts, AsyncSettings, AsyncStalled
from rlvr.rollout.base import EngineError, SamplingParams
from rlvr.rollout.engines.hf import HFGenerateEngine
from rlvr.rollout.sampling import GroupSampler
from rlvr.rollout.sync import SyncProbe


class ClosingEngine(HFGenerateEngine):
    """The real engine, remembering whether it was closed (a worker the run must not leave behind)."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


class Pipeline:
    """An `AsyncRollouts` on the real model, and a trainer that nudges its weights every step."""

    def __init__(self, sft_base, k: int = 2, partial: bool = False, last_round: int = 0, timeout_s: float = 120.0,
                 start_delay_s: float = 0.0, stall_in_round: int = 0, die_in_round: int = 0, on_restart=None):
        import tasks
        from envs.pool import VerifierPool

        self.model, self.tok = load_model(str(sft_base))
        self.task = tasks.make("arithmetic-v1", direct_frac=0.5)
        self.pool = VerifierPool(self.task.env, workers=0)
        self.release = threading.Event()  # a round that stalls waits for it
        sampler = GroupSampler(generate=lambda problems: [], submit=lambda p, c: self.pool.submit(p, [x.text for x in c]),
                               group_size=2, chunk_prompts=2)

        self.engines: list[ClosingEngine] = []

        def make(slots, previous):
            time.sleep(start_delay_s)  # a slow start-up (a loaded machine spawning a worker)
            if previous is not None and on_restart is not None:
                on_restart(self)
            self.engines.append(ClosingEngine(self.model, self.tok, decode="kv", private=True))
            return self.engines[-1]

        def generate(engine, problems, sampling):
            if die_in_round and self.pipe._round == die_in_round and engine is self.engines[0]:  # the first worker dies
                raise EngineError("the generation worker died (exit code -9)")
            if stall_in_round and self.pipe._round == stall_in_round:
                self.release.wait()
            return engine.generate([self.task.env.format_prompt(p) for p in problems], 2, sampling)

        settings = AsyncSettings(k, partial, 0, timeout_s, 1 if die_in_round else 0, group_size=2, prompts_per_step=2, max_new_tokens=16, seed=0,
                                 split="train", last_round=last_round)
        self.said: list[str] = []
        self.pipe = AsyncRollouts(settings, make, self.model, True, sampler, generate, SamplingParams(max_new_tokens=16), self.task,
                                  self.tok, self.said.append)

    def step(self) -> dict[str, float]:
        """What `GroupSource._collect_async` and the training step do with one batch."""
        pipe, pad = self.pipe, self.tok.pad_token_id
        produced, metrics = pipe.take()
        if pipe.probe is None:
            pipe.set_probe(SyncProbe.from_completions([c for g in produced.report.generated for c in g.completions], 1e-4), self.model, pad)
        metrics |= pipe.check_probe(produced)
        with torch.no_grad():  # a training step
            for p in self.model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        pipe.advance(pipe.version + 1, self.model, pad)
        return metrics

    def close(self) -> None:
        self.release.set()
        self.pipe.close()
        self.pool.close()


@pytest.fixture
def pipelines(sft_base):
    made: list[Pipeline] = []

    def make(**kwargs) -> Pipeline:
        made.append(Pipeline(sft_base, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_no_batch_is_generated_past_the_last_step_and_the_last_checkpoint_waits_for_none(pipelines):
    run = pipelines(k=2, last_round=3)
    run.pipe.start(0)
    for _ in range(3):
        run.step()
    state = run.pipe.state_dict()  # the final checkpoint: the schedule would run 2 rounds ahead, but no step trains them
    assert state["rounds"] == [] and state["producer"].round == 3
    deadline = time.monotonic() + 60
    while run.pipe._activity != "done: the run's last batch (3) is generated" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.pipe.state.round == 3 and run.pipe._activity.startswith("done")  # the producer stopped after the last batch
    assert run.pipe._thread.is_alive()  # and stays until closed: a worker process dies with the thread that started it


def test_every_batch_logs_the_proof_of_its_version_and_a_resume_keeps_the_probe(pipelines):
    """The sync probe's result for the version that sampled each batch is logged with it, from the
    first step (scored at once when the probe is made) to the batches restored from a checkpoint,
    whose versions were scored before it and are judged after the resume with the saved trainer side."""
    first = pipelines(k=2, last_round=6)
    first.pipe.start(0)
    rows = [first.step() for _ in range(3)]
    assert all("sync/logprob_gap_mean" in r and r["sync/logprob_gap_mean"] < 1e-4 for r in rows)
    state = first.pipe.state_dict()
    assert [p.round for p in state["rounds"]] == [4, 5] and state["probe"] is first.pipe.probe
    weights = {k: v.clone() for k, v in first.model.state_dict().items()}
    first.close()

    second = pipelines(k=2, last_round=6)
    second.model.load_state_dict(weights)
    second.pipe.load_state_dict(state)
    second.pipe.start(3)
    rows = [second.step() for _ in range(3)]
    assert [r["async/round"] for r in rows] == [4.0, 5.0, 6.0] and [r["async/version"] for r in rows] == [1.0, 2.0, 3.0]
    assert all("sync/logprob_gap_mean" in r and r["sync/logprob_gap_mean"] < 1e-4 for r in rows)


@pytest.mark.parametrize("change", [{"k": 3}, {"k": 2, "partial": True}])
def test_a_resume_with_another_schedule_is_refused_naming_both(pipelines, change):
    first = pipelines(k=3 if change.get("partial") else 2, partial=False, last_round=6)
    first.pipe.start(0)
    first.step()
    state = first.pipe.state_dict()
    saved_k = first.pipe.k
    first.close()
    second = pipelines(last_round=6, **change)
    with pytest.raises(UserError) as e:
        second.pipe.load_state_dict(state)
    message = str(e.value)
    assert "\n" not in message
    assert f"rollout.async.max_staleness={saved_k}" in message and f"max_staleness={second.pipe.k}" in message
    assert "partial=false" in message and f"partial={'true' if change.get('partial') else 'false'}" in message


def test_a_checkpoint_that_stalls_names_its_step_and_keeps_it(pipelines):
    """The checkpoint after step 1 waits for batch 3 (k = 2); its generation hangs: the checkpoint
    is written with the batches finished (2), and the next batch raises the stall, naming the checkpoint."""
    run = pipelines(k=2, last_round=6, timeout_s=3.0, stall_in_round=3)
    run.pipe.start(0)
    run.step()
    state = run.pipe.state_dict()
    assert state["version"] == 1 and [p.round for p in state["rounds"]] == [2] and state["producer"].round == 2
    with pytest.raises(AsyncStalled) as e:
        run.pipe.take()
    assert "the checkpoint after step 1 waited 3 s (rollout.async.timeout_s) for batch 3" in str(e.value)
    assert "is stuck: generating round 3" in str(e.value) and "step 1 is saved" in str(e.value)


def test_a_slow_worker_start_is_not_a_stall(pipelines):
    """The stall clock runs from when the worker is ready: a start-up longer than timeout_s is waited for. (timeout_s
    also bounds the first round's generation once the worker is ready: 1 s was too little beside a second test lane.)"""
    run = pipelines(k=1, last_round=2, timeout_s=10.0, start_delay_s=12.0)
    run.pipe.start(0)
    assert run.step()["async/round"] == 1.0


def test_a_shutdown_that_begins_while_a_dead_worker_restarts_closes_the_new_worker_and_restarts_nothing(pipelines):
    closing: list[threading.Thread] = []

    def shut_down_meanwhile(run):  # the trainer stops (Ctrl-C, the end of the run) while the worker is being started again
        closer = threading.Thread(target=run.pipe.close)
        closer.start()
        closing.append(closer)  # listed once started: the test joins it
        deadline = time.monotonic() + 30
        while not run.pipe._stop and time.monotonic() < deadline:
            time.sleep(0.01)

    run = pipelines(k=2, last_round=6, die_in_round=1, on_restart=shut_down_meanwhile)
    run.pipe.start(0)
    closing_started = time.monotonic() + 120
    while not closing and time.monotonic() < closing_started:
        time.sleep(0.05)
    closing[0].join(60)
    assert not closing[0].is_alive() and not run.pipe._thread.is_alive()
    assert len(run.engines) == 2 and all(e.closed for e in run.engines)  # the new worker was not left running
    assert run.pipe.engine is run.engines[0]  # and never took the dead one's place
