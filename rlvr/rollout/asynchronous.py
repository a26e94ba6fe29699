"""Asynchronous generation (``rollout.async.max_staleness = k >= 1``): generation never waits for
training beyond the staleness bound.

    trainer:   take batch n -> update -> push version n -> take batch n+1 -> ...
    producer:  ... wait for version max(0, r-1-lag) -> load it into the worker -> generate, verify,
               filter round r -> queue it -> round r+1 ...

`AsyncRollouts` runs a producer thread in the trainer's process that drives the generation worker
(an engine in a process of its own: `rlvr.rollout.worker.ProcessEngine` for ``rollout.engine=hf``,
the ``rlvr rollout serve`` server for ``vllm_server``), verifies what it generates in the run's
verifier pool, applies the algorithm's group filter (`rlvr.rollout.sampling.GroupSampler`) and puts
each finished round, a training batch, into a bounded queue. Which version samples which round is
fixed (`rlvr.rollout.staleness`), and every generate call of round r is seeded from (seed, r, call),
so a run is reproducible, its resume exact, and a worker that dies regenerates its round as it was.

- **Weights**: after each training step the trainer stages its weights as the next version in one
  of ``lag + 1`` shared-memory slots (`rlvr.rollout.worker.WeightSlots`: a memory copy; the trainer
  does not wait for the worker), and the producer loads a version into the worker between rounds.
  The sync probe (`rlvr.rollout.sync.SyncProbe`) proves every version the worker loads: the worker
  scores the probe after each load, the trainer compares with its own log-probs of that version
  (taken when it pushed it) when it takes the round; a failed check stops the run.
- **Staleness**: each token carries the version that sampled it; `rlvr.rollout.staleness.within_bound`
  drops any group with a sample older than k before training (the schedule never makes one).
- **Partial rollouts** (``rollout.async.partial``): `rlvr.rollout.partial.PartialRollouts` cuts long
  generations at a per-round budget and continues them in the next round.
- **Checkpoints**: `state_dict` waits until the rounds up to ``version + lag`` are done (they need
  only versions the trainer already pushed; none past the run's last step, which no step trains, is
  generated) and saves them with the producer's state after them, the probe and its results; a
  resumed run restores them and starts the worker at the next round with the checkpoint's weights.
  A resume with another ``max_staleness`` or ``partial`` is refused (its rounds follow the saved
  schedule); a checkpoint whose wait stalls saves the rounds finished so far and the run stops.
  A batch taken by a step that failed is saved again (the resumed run trains it), and from the first
  batch whose every verification failed (an environment outage) on nothing is saved: the producer's
  state before it is, and a resume generates those rounds again with the checkpoint's weights.
- **Several training processes** (`rlvr.rollout.async_ranks`): one pipeline, on rank 0, makes global
  batches (``prompts_per_step`` x processes prompts) that every rank trains a share of; every rank
  gathers the weights of each version (``push(updates, weights)``) and scores the probe with the
  sharded policy (``advance``/``set_probe`` take the ``trainer_lp`` they computed together).
- **Faults**: a worker that dies is started again (``rollout.async.restarts``; its round is
  regenerated), then the run stops naming it; a side that makes no progress for
  ``rollout.async.timeout_s`` is named (`AsyncStalled`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from envs.types import Problem, Status
from rlvr import TrainingError, UserError
from rlvr.rollout.base import Completion, EngineError, RolloutEngine, SamplingParams
from rlvr.rollout.partial import Parked, PartialRollouts
from rlvr.rollout.sampling import GroupSampler, SamplingReport
from rlvr.rollout.staleness import generation_lag, max_segments, round_version, segment_tokens
from rlvr.rollout.sync import SyncProbe
from rlvr.rollout.worker import WeightSlots
from tasks.base import Task, stable_hash


STARTUP_S = 600.0  # a generation worker's start-up (spawn, imports, the model copy) may take this long before it counts as stuck


class AsyncStalled(TrainingError):
    """One side of an asynchronous run made no progress for ``rollout.async.timeout_s``, or its
    generation worker died past its restarts; the message names the side. No checkpoint can hold the
    run's state at that moment: the last one is kept."""


@dataclass
class ProducerState:
    """Where the producer stands after a round: what a checkpoint or a retry of the next round needs.

    Attributes:
        round: The last round finished.
        position: The prompt stream's position after it.
        yield_estimate: The sampler's kept/generated estimate after it.
        parked: Partial rollouts waiting for their next round.
    """

    round: int = 0
    position: int = 0
    yield_estimate: float = 1.0
    parked: list[Parked] = field(default_factory=list)


@dataclass
class Produced:
    """One finished round: a training batch and how it was made.

    Attributes:
        round / version: The round (the step that trains it) and the policy version that sampled it
            (partial rollouts: its new generations; continued ones carry older versions too).
        report: The batch (`SamplingReport`; completions carry per-token versions).
        state: The producer's state after this round.
        probe: ``(version, engine log-probs by server)`` for each version the worker loaded before
            this round (one entry ``""`` but with several rollout servers; the trainer checks each
            against its own).
        busy_s / wait_s: Seconds producing the round, and waiting for its weights before.
        restarts: Worker restarts this round cost.
        before: The producer's state before this round (a checkpoint that leaves the round out
            restarts the producer from it).
    """

    round: int
    version: int
    report: SamplingReport
    state: ProducerState
    probe: list[tuple[int, dict[str, list[list[float]]]]] = field(default_factory=list)
    busy_s: float = 0.0
    wait_s: float = 0.0
    restarts: int = 0
    before: ProducerState | None = None


@dataclass
class AsyncSettings:
    """What the producer needs to know of the run (from ``rollout`` and ``rollout.async``)."""

    max_staleness: int
    partial: bool
    partial_tokens: int
    timeout_s: float
    restarts: int
    group_size: int
    prompts_per_step: int
    max_new_tokens: int
    seed: int
    split: str
    run_dir: str = "RUN"
    last_round: int = 0  # the run's last step (update.steps): no round after it is generated; 0 = no end


class AsyncRollouts:
    """The asynchronous pipeline of one run (see the module docstring).

    Args:
        settings: `AsyncSettings`.
        make_engine: ``(slots, previous engine or None) -> engine``: the generation worker's engine
            (own weights; it loads versions from ``slots``), built at `start`, and after a death a
            worker started again (or a new client).
        weights: What the trainer pushes (the policy module, or merged LoRA weights).
        full_state: The slots hold a module's whole state dict (a `ProcessEngine`) rather than its
            parameters by name (a server).
        sampler: The run's `GroupSampler` (filter, budget, verifier submission); a copy drives the rounds.
        generate: ``(engine, problems, sampling) -> completions`` (G per problem, episodes included).
        task: The task whose training split is streamed.
        tokenizer: The policy's tokenizer (partial rollouts decode joined completions).
        say: Prints a line on the run's console.
    """

    def __init__(self, settings: AsyncSettings, make_engine: Callable[[WeightSlots, RolloutEngine | None], RolloutEngine],
                 weights: Any, full_state: bool, sampler: GroupSampler, generate: Callable[..., list[Completion]],
                 sampling: SamplingParams, task: Task, tokenizer: Any, say: Callable[[str], None]):
        self.settings, self.make_engine, self.weights = settings, make_engine, weights
        self.engine: RolloutEngine | None = None
        self.sampling, self.task, self.tokenizer, self.say = sampling, task, tokenizer, say
        self.k = settings.max_staleness
        self.lag = generation_lag(self.k, settings.partial)
        self.slots = WeightSlots(weights, self.lag + 2, full_state=full_state)  # lag + 1 versions, and the engine's own
        self.partial = PartialRollouts(settings.group_size, settings.max_new_tokens,
                                       segment_tokens(settings.max_new_tokens, self.k, settings.partial_tokens),
                                       max_segments(self.k, self.lag)) if settings.partial else None
        self._generate_for = generate
        self.sampler = dataclasses.replace(sampler, generate=self._generate_new, carried=self._carried if self.partial else None,
                                           hold=self.partial.hold if self.partial else None)
        self.version = 0  # the trainer's: training steps done (the policy it holds now)
        self.state = ProducerState()
        self.queue: deque[Produced] = deque()
        self.updates_of: dict[int, int] = {}  # version -> the policy's optimizer steps then
        self.probe: SyncProbe | None = None
        self.trainer_probe: dict[int, torch.Tensor] = {}  # version -> the trainer's probe log-probs
        self.restarts_left = settings.restarts
        self._cond = threading.Condition()
        self._pushed = -1
        self._loaded: int | None = None
        self._probed: int | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._activity = "starting"
        self._progress_at = time.monotonic()
        self._last_take: float | None = None
        self._round = self._round_version = self._round_calls = self._taken = 0
        self._stream: Any = None
        self._checkpoint_stall: AsyncStalled | None = None  # a stall a checkpoint met: the run stops at its next batch
        self._starting = False  # the worker is starting: its start-up is not a stall (the stall clock runs from when it is ready)
        self._floor = 0  # after a resume: the oldest version the worker has (the checkpoint's); older rounds take it instead
        self.proofs: dict[int, dict[str, float]] = {}  # version -> the probe's result for it (logged with every batch it sampled)
        self._in_step: Produced | None = None  # the batch taken by the step in progress

    # -- the trainer's side -----------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, updates: int, weights: Any = None) -> None:
        """Push the trainer's current weights (``weights``, else those given at construction) as its
        current version, start the generation worker and the producer."""
        self.push(updates, weights)
        self._moved("starting the generation worker")
        self._thread = threading.Thread(target=self._run, name="rlvr-async-producer", daemon=True)
        self._thread.start()

    def push(self, updates: int, weights: Any = None) -> None:
        """Stage the trainer's weights as version ``self.version`` (``updates``: its optimizer steps;
        ``weights``: gathered in full by the caller when the policy is sharded, else those given at construction)."""
        self.slots.stage(self.version % (self.lag + 1), self.weights if weights is None else weights)
        self.updates_of[self.version] = updates
        with self._cond:
            self._pushed = self.version
            self._cond.notify_all()

    def advance(self, updates: int, model: torch.nn.Module | None, pad_id: int, weights: Any = None,
                trainer_lp: torch.Tensor | None = None) -> None:
        """After a training step: the policy is one version newer; push it (and take the trainer's
        probe log-probs of it, which the worker's score of it is compared with). Several processes
        (`rlvr.rollout.async_ranks`): ``weights`` and ``trainer_lp`` come computed by every rank together."""
        self.version += 1
        self._in_step = None
        if self.probe is not None:
            self.trainer_probe[self.version] = trainer_lp if trainer_lp is not None else self.probe.trainer_logprobs(model, pad_id)
        self.push(updates, weights)

    def set_probe(self, probe: SyncProbe, model: torch.nn.Module | None, pad_id: int, trainer_lp: torch.Tensor | None = None) -> None:
        """Check every version the worker loads from now on with ``probe``; the one it holds now (the
        trainer's current version: nothing newer was pushed) is scored and judged at once, so the
        first batches are proven too, whatever the timing. ``trainer_lp``: the trainer's log-probs of
        the probe, when every rank computed them together (a sharded forward)."""
        self.trainer_probe[self.version] = trainer_lp if trainer_lp is not None else probe.trainer_logprobs(model, pad_id)
        with self._cond:
            self.probe = probe
        if self.engine is not None and self._loaded == self.version:
            try:
                each = probe.engine_logprobs_each(self.engine)
            except EngineError:
                return  # the worker died meanwhile: the producer starts it again and scores the probe after its load
            self._judge(self.version, each)

    def take(self) -> tuple[Produced, dict[str, float]]:
        """The next round (the batch for step ``version + 1``), waiting for it, and metrics of the
        wait. Raises the producer's error, or `AsyncStalled` when nothing moved for the timeout."""
        wanted = self.version + 1
        t0 = time.monotonic()
        if self._checkpoint_stall is not None:
            raise self._checkpoint_stall
        with self._cond:
            while not (self.queue and self.queue[0].round == wanted):
                self._raise_if_failed()
                if self._stalled_since(t0):
                    raise self._fail(AsyncStalled(self._stalled_message(wanted)))
                self._cond.wait(timeout=0.5)
            produced = self.queue.popleft()
            depth = len(self.queue)
            self._in_step = produced  # saved again until a step trains it: a step that fails runs again on resume
        now = time.monotonic()
        waited = now - t0
        window = now - (self._last_take if self._last_take is not None else t0)
        self._last_take = now
        samples = sum(len(g.completions) for g in produced.report.kept)
        generated = sum(len(g.completions) for g in produced.report.generated)
        metrics = {"async/round": float(produced.round), "async/version": float(produced.version), "async/queue_depth": float(depth),
                   "async/trainer_wait_s": waited, "async/trainer_idle_frac": waited / window if window > 0 else 0.0,
                   "async/generator_idle_frac": produced.wait_s / max(produced.wait_s + produced.busy_s, 1e-9),
                   "async/samples_per_s": samples / window if window > 0 else 0.0,
                   "async/generated_per_s": generated / max(produced.busy_s, 1e-9), "async/worker_restarts": float(produced.restarts)}
        if self.partial is not None:
            metrics["async/parked_groups"] = float(len(produced.state.parked))
        return produced, metrics

    def check_probe(self, produced: Produced) -> dict[str, float]:
        """Compare the worker's probe scores that came with a round with the trainer's log-probs of
        the same versions (`SyncProbe.judge` raises `WeightSyncError` on a failed sync)."""
        for version, each in produced.probe:
            self._judge(version, each)
        for stale in [v for v in self.trainer_probe if v < produced.version]:
            self.trainer_probe.pop(stale)  # versions the worker skipped (never loaded)
        for old in [v for v in self.proofs if v < produced.version - self.k]:
            self.proofs.pop(old)  # no batch sampled by them is trained any more
        return dict(self.proofs.get(produced.version, {}))  # the proof of the version that sampled this batch

    def _judge(self, version: int, each: dict[str, list[list[float]]]) -> None:
        """Compare the worker's probe scores of ``version`` (each copy of its weights: every server, with
        several, `SyncProbe.engine_logprobs_each`) with the trainer's (taken when it pushed it)."""
        trainer_lp = self.trainer_probe.pop(version, None)
        if self.probe is None or trainer_lp is None:
            return  # scored again (the worker restarted): the version was judged already
        try:
            result = self.probe.judge_each(each, trainer_lp)
        except Exception as e:  # the worker's batches cannot be trusted, nor saved
            raise self._fail(e)
        self.proofs[version] = result.metrics()

    def queued_batch_waiting(self) -> bool:
        """Whether a finished batch waits in the queue behind the next one (samples in flight)."""
        with self._cond:
            return len(self.queue) > 0

    def _fail(self, error: BaseException) -> BaseException:
        """Mark the pipeline failed (no checkpoint can hold it now) and return ``error`` to raise."""
        with self._cond:
            self._error = self._error or error
        return error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _stalled_since(self, t0: float) -> bool:
        """Whether nothing moved on the generation side for ``timeout_s`` since ``t0`` (a worker
        starting counts only past a start-up allowance of its own: a loaded machine spawns slowly)."""
        allowed = max(self.settings.timeout_s, STARTUP_S) if self._starting else self.settings.timeout_s
        return time.monotonic() - max(self._progress_at, t0) > allowed

    def _stalled_message(self, wanted: int, checkpoint: bool = False) -> str:
        idle = time.monotonic() - self._progress_at
        if self._activity.startswith("waiting for the weights"):
            side = (f"the generation side waits for weights the trainer has not pushed ({self._activity}; the trainer holds "
                    f"version {self.version}, pushed {self._pushed})")
        elif self._activity.startswith("done"):  # nothing is left to generate, yet the batch is missing
            side = (f"the generation worker has generated every batch of the run (up to {self.settings.last_round}) and batch "
                    f"{wanted} is not among those waiting (it was lost: resume from an earlier checkpoint)")
        else:
            pid = getattr(self.engine, "pid", None)
            worker = f"the generation worker{f' (pid {pid})' if pid else ''}"
            side = f"{worker} is stuck: {self._activity} for {idle:.0f} s"
        waiter = (f"the checkpoint after step {self.version} waited {self.settings.timeout_s:g} s (rollout.async.timeout_s) for batch "
                  f"{wanted} (generated ahead of the trainer)" if checkpoint else
                  f"the trainer waited {self.settings.timeout_s:g} s (rollout.async.timeout_s) for the batch of step {wanted}")
        kept = (f"step {self.version} is saved with the batches finished before (a resume generates the others with its weights)"
                if checkpoint else "the run keeps its checkpoints")
        return (f"rollout.async: {waiter} and nothing moved: {side}; raise rollout.async.timeout_s if generation is this slow, else "
                f"look at the engine; {kept} (`rlvr train {self.settings.run_dir} --resume`)")

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The rounds the worker produces ahead of the trainer (waited for: up to ``version + lag``,
        all sampled by versions the trainer has pushed; none past the run's last step) and the
        producer's state after them, with the probe and what it proved of the versions behind them.

        When that wait stalls, the state holds the rounds finished so far (a resume generates the
        others with the checkpoint's weights: fresher than scheduled, within the bound) and the run
        stops at its next batch naming the stall: the step just trained is kept."""
        last = self.version + self.lag
        if self.settings.last_round:
            last = min(last, self.settings.last_round)
        t0 = time.monotonic()
        stalled = False
        with self._cond:
            while not (self.state.round >= last or self._error is not None):
                if self._stalled_since(t0):  # raised at the next batch, once this checkpoint is written
                    self._error = self._checkpoint_stall = AsyncStalled(self._stalled_message(last, checkpoint=True))
                    stalled = True
                    break
                self._cond.wait(timeout=0.5)
            if self._error is not None and not stalled:
                raise self._error  # a failed probe or a dead worker: what it left cannot be saved as it is
            rounds = [p for p in self.queue if p.round <= last]
            if self._in_step is not None and self._in_step.round > self.version:
                rounds.insert(0, self._in_step)  # taken by a step that did not finish (a failure inside it): trained on resume
            state = rounds[-1].state if rounds else self.state
            failed = next((i for i, p in enumerate(rounds) if _all_failed(p.report) and p.before is not None), None)
            if failed is not None:  # an outage's batches teach nothing: a resume generates them again (with the checkpoint's weights)
                rounds, state = rounds[:failed], rounds[failed].before
        return {"version": self.version, "rounds": rounds, "producer": state, "updates_of": dict(self.updates_of),
                "restarts_left": self.restarts_left, "max_staleness": self.k, "partial": self.partial is not None,
                "probe": self.probe, "trainer_probe": dict(self.trainer_probe), "proofs": dict(self.proofs)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's state before `start` (the worker then begins with the next round).
        Raises `UserError` when the checkpoint's queued batches were made for another schedule."""
        self._check_same_schedule(state)
        self.version = self._floor = int(state["version"])
        self.queue = deque(state["rounds"])
        self.state = state["producer"]
        self.probe = state.get("probe")
        self.trainer_probe = dict(state.get("trainer_probe", {}))
        self.proofs = dict(state.get("proofs", {}))
        self.updates_of = dict(state.get("updates_of", {}))
        # (the saved "restarts_left" is not restored: each run, a resume too, has rollout.async.restarts of its own;
        # a run stopped for want of them would otherwise stop again at the resume's first death, whatever it set)
        self.sampler.yield_estimate = self.state.yield_estimate
        if self.partial is not None:
            self.partial.restore(self.state.parked)

    def _check_same_schedule(self, state: dict[str, Any]) -> None:
        saved_k, saved_partial = state.get("max_staleness"), state.get("partial")
        if saved_k is None:
            return  # written before these were saved
        new_partial = self.partial is not None
        if saved_k == self.k and saved_partial == new_partial:
            return
        queued, parked = len(state["rounds"]), len(state["producer"].parked)
        raise UserError(f"this checkpoint was written with rollout.async.max_staleness={saved_k} and rollout.async.partial="
                        f"{str(saved_partial).lower()}, and is resumed with max_staleness={self.k} and partial={str(new_partial).lower()}: "
                        f"its {queued} queued batches ({parked} parked generations) follow the saved schedule and would be dropped "
                        f"or trained out of bound; resume with rollout.async.max_staleness={saved_k} rollout.async.partial="
                        f"{str(saved_partial).lower()}")

    @property
    def can_checkpoint(self) -> bool:
        """Whether `state_dict` can save a consistent state (not after the pipeline failed)."""
        return self._error is None

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self.engine is not None:
            self.engine.close()  # a worker stuck in a call is killed, which ends the producer's call
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.engine is not None:
            self.engine.close()  # one the producer was still starting above (a run stopped while it waited for its first batch)

    # -- the producer thread ----------------------------------------------------------------------------

    def _moved(self, activity: str) -> None:
        self._activity = activity
        self._progress_at = time.monotonic()

    def _run(self) -> None:
        try:
            # built here, not in the trainer's thread: the trainer goes on (e.g. evaluates) while the worker starts
            self._starting = True
            self.engine = self.make_engine(self.slots, None)
            self._starting = False
            self._moved("waiting to start the first round")
            while True:
                round_ = self.state.round + 1
                if self.settings.last_round and round_ > self.settings.last_round:  # no step trains a later batch
                    self._moved(f"done: the run's last batch ({self.settings.last_round}) is generated")
                    with self._cond:  # this thread stays: the worker it started dies with it (PR_SET_PDEATHSIG)
                        while not self._stop:
                            self._cond.wait(timeout=0.5)
                    return
                version = self._version_for(round_)
                t0 = time.monotonic()
                if not self._wait_for(version):
                    return
                waited = time.monotonic() - t0
                produced = self._produce_with_restarts(round_, version)
                produced.wait_s = waited
                with self._cond:
                    self.queue.append(produced)
                    self.state = produced.state
                    self._cond.notify_all()
                self._moved(f"waiting to start round {round_ + 1}")
        except BaseException as e:  # raised in the trainer's thread by take()
            with self._cond:
                if not self._stop:
                    self._error = e
                self._cond.notify_all()

    def _version_for(self, round_: int) -> int:
        """The version that samples ``round_``: the schedule's, or after a resume from a checkpoint
        that holds fewer rounds than the schedule runs ahead, the checkpoint's (fresher, within k)."""
        return max(round_version(round_, self.lag), self._floor)

    def _wait_for(self, version: int) -> bool:
        """Block until the trainer pushed ``version``; False when closing. Says once when the wait
        outlasts the timeout (the trainer is then the stuck side)."""
        warned = False
        with self._cond:
            self._moved(f"waiting for the weights of version {version}")
            t0 = time.monotonic()
            while self._pushed < version and not self._stop:
                self._cond.wait(timeout=0.5)
                if not warned and time.monotonic() - t0 > self.settings.timeout_s:
                    self.say(f"warning: rollout.async: the generation worker has waited {time.monotonic() - t0:.0f} s for the weights of "
                             f"version {version} (rollout.async.timeout_s={self.settings.timeout_s:g}): the trainer is stuck in step "
                             f"{self.version + 1}")
                    warned = True
            return not self._stop

    def _produce_with_restarts(self, round_: int, version: int) -> Produced:
        before = ProducerState(self.state.round, self.state.position, self.sampler.yield_estimate,
                               self.partial.state() if self.partial else [])
        restarts = 0
        while True:
            try:
                produced = self._produce(round_, version)
                produced.restarts, produced.before = restarts, before
                return produced
            except EngineError as e:
                if self._stop:
                    raise
                if self.restarts_left <= 0:
                    raise AsyncStalled(f"{e} in round {round_}, with no restart left (rollout.async.restarts={self.settings.restarts}): "
                                       f"the run stops and keeps its checkpoints (continue with `rlvr train {self.settings.run_dir} --resume`)") from None
                self.restarts_left -= 1
                restarts += 1
                self.say(f"warning: {e} in round {round_}; starting it again ({self.settings.restarts - self.restarts_left} of "
                         f"rollout.async.restarts={self.settings.restarts}); the round is generated again")
                self._moved("restarting the generation worker")
                self._starting = True
                engine = self.make_engine(self.slots, self.engine)
                self._starting = False
                with self._cond:  # a shutdown that began while the worker restarted closed the old engine only
                    stopping = self._stop
                    if not stopping:
                        self.engine = engine
                if stopping:
                    engine.close()
                    raise e
                self._moved(f"restarted: generating round {round_} again")
                self._loaded = self._probed = None
                self._restore(before)

    def _restore(self, state: ProducerState) -> None:
        self.state = state
        self.sampler.yield_estimate = state.yield_estimate
        if self.partial is not None:
            self.partial.restore(state.parked)

    def _produce(self, round_: int, version: int) -> Produced:
        t0 = time.monotonic()
        probe = []
        if self._loaded != version:
            self._moved(f"loading the weights of version {version} into the worker")
            self.engine.load_weights(self.slots[version % (self.lag + 1)])
            self._loaded = version
        probe_now = self.probe
        if probe_now is not None and self._probed != version:
            self._moved(f"scoring the sync probe with version {version}")
            probe.append((version, probe_now.engine_logprobs_each(self.engine)))  # each server, with several
            self._probed = version
        self._round, self._round_version, self._round_calls = round_, version, 0
        self._stream, self._taken = None, 0  # the round reads the stream from where the last one left it
        self._moved(f"generating round {round_} with version {version}")
        report = self.sampler.collect(self._take_prompts, self.settings.prompts_per_step)
        report.weights_version = version
        state = ProducerState(round_, self._position, self.sampler.yield_estimate, self.partial.state() if self.partial else [])
        return Produced(round_, version, report, state, probe, busy_s=time.monotonic() - t0)

    @property
    def _position(self) -> int:
        return self.state.position + self._taken

    def _take_prompts(self, n: int) -> list[Problem]:
        if self._stream is None:
            self._stream = self.task.stream(self.settings.split, start=self.state.position, seed=self.settings.seed)
        self._taken += n
        return [next(self._stream) for _ in range(n)]

    def _next_sampling(self, **changes: Any) -> SamplingParams:
        """The sampling of the round's next generate call, seeded by (seed, round, call) (`tasks.base.stable_hash`)."""
        self._round_calls += 1
        seed = stable_hash("async-generate", self.settings.seed, self._round, self._round_calls) % (2 ** 31)
        return dataclasses.replace(self.sampling, seed=seed, **changes)

    def _generate_new(self, problems: list[Problem]) -> list[Completion]:
        """G completions per new prompt (partial rollouts: within the first round's budget), marked with the round's version."""
        changes = {"max_new_tokens": self.partial.first_budget()} if self.partial is not None else {}
        completions = self._generate_for(self.engine, problems, self._next_sampling(**changes))
        for c in completions:
            c.versions = [self._round_version] * len(c.token_ids)
        self._moved(f"generating round {self._round} with version {self._round_version}")
        return completions

    def _carried(self) -> tuple[list[Problem], list[Completion]]:
        """Partial rollouts: the parked groups continued with this round's version."""
        out = self.partial.carried(lambda prompts, sampling: self.engine.generate_ids(prompts, 1, self._next_sampling(
            max_new_tokens=sampling.max_new_tokens)), self.sampling, self._round_version, self.tokenizer)
        self._moved(f"generating round {self._round} with version {self._round_version}")
        return out


def _all_failed(report: SamplingReport) -> bool:
    """Whether every verification of a batch failed (an error or a timeout: nothing in it was scored)."""
    verdicts = [v for g in report.generated for v in g.verdicts]
    return bool(verdicts) and all(v.status in (Status.ERROR, Status.TIMEOUT) for v in verdicts)


__all__ = ["AsyncRollouts", "AsyncSettings", "AsyncStalled", "Produced", "ProducerState"]
