"""Recognising a collective broken by a lost process, and the roll call that names the lost ranks
(the end-to-end run with a killed node is in test_multinode.py)."""

from __future__ import annotations

import torch

from rlvr.train.lost_process import first_line, is_lost_process, roll_call

GLOO = ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:46786: Connection reset by peer. "
        "This is typically caused by a remote worker hanging or bugs in the application.")


def test_gloo_and_distributed_errors_are_lost_processes_other_errors_are_not():
    assert is_lost_process(RuntimeError(GLOO))
    assert is_lost_process(torch.distributed.DistNetworkError("store went away"))
    try:  # raised while handling one (a checkpoint attempted after the loss)
        try:
            raise RuntimeError(GLOO)
        except RuntimeError as inner:
            raise ValueError("could not save") from inner
    except ValueError as outer:
        assert is_lost_process(outer)
    assert not is_lost_process(RuntimeError("CUDA out of memory"))
    assert not is_lost_process(BrokenPipeError("Broken pipe"))


def test_the_roll_call_names_the_ranks_that_did_not_answer(tmp_path):
    folder = tmp_path / "roll_call" / "step-5"
    assert roll_call(folder, rank=2, world=4, wait_s=0) == [0, 1, 3]
    assert (folder / "rank-2").read_text().split()[1].isdigit()  # host and pid of who answered
    for rank in (0, 1):
        (folder / f"rank-{rank}").write_text("host 1\n")
    assert roll_call(folder, rank=3, world=4, wait_s=0) == []


def test_the_error_is_cut_to_its_first_sentence():
    assert first_line(RuntimeError(GLOO)) == "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:46786: Connection reset by peer"
    assert first_line(RuntimeError("")) == "RuntimeError"
