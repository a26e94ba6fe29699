"""Imported last by the generation workers' fork server (`rlvr.rollout.worker.worker_context`), after
torch, transformers and the engine: moves every object they made out of the garbage collector's reach
(`gc.freeze`).

The collector then never walks those few hundred thousand objects again: not in each worker forked
from the server (whose collections would otherwise also write to, and so copy, the pages it shares
with the server), and not when the server ends with the trainer's process, where walking them kept
it busy for 1-2 s of CPU after the run had exited (measured on a 2-core machine).
"""

import gc

gc.freeze()
