"""The ``preference`` recipe: DPO and its variants on verified pairs, and KTO on pass/fail labels.
One update fed by one of three example sources (`rlvr.train.preference.sources`):

    each step:  examples (with reference log-probs) -> for each epoch and minibatch: objective -> optimizer step
                -> (iterative DPO) the reference takes the policy's weights

    offline pairs (dpo):  pairs file -> reference log-probs of the pairs the run will use (cached)
                          -> each step: a batch of pairs
    online pairs (online_dpo): sample groups -> verify -> keep groups with a pass and a fail -> pairs
    online labels (kto):  sample groups -> verify -> each completion desirable (passed) or not
                          (the objective takes each minibatch's reference point)

Modules: `rlvr.train.preference.config` (the config), `.recipe` (the update), `.sources` (the example
sources), `.batches` (the batches, their objectives and reference scoring).

The loss is a registered pure function (`rlvr.algos.preference`), the settings are
``algo.preference.*`` (`rlvr.algos.config.PreferenceConfig`), the offline pairs file is the
``pairs.*`` section of this recipe's config. Sampling and verification are the same
`rlvr.rollout.groups.GroupSource` the policy-gradient recipe uses (with the algorithm's group filter:
DAPO's dynamic sampling keeps exactly the groups that give pairs); accumulation, checkpoints and the
loop are the harness's.

The reference is the policy's starting weights. For offline pairs its log-probs are computed
before the first step, with the policy itself (which still has those weights), for the pairs the
run's steps will draw (``update.steps x pairs.batch_size x processes`` data positions of the seeded
epoch shuffles, not the whole file), and cached in the run directory (``reference_logps.pt``, NaN
for pairs not scored), so no second model is held in memory. The cache is keyed by a fingerprint of
the reference (``model.name_or_path`` and its files' names, sizes and modification times) and of
every pair's token ids; a resumed run scores what its remaining steps draw and the cache lacks
(none when it resumes the same run; every such pair when the fingerprint differs: another pairs
file, tokenizer or base) from a temporarily loaded reference. ``algo.preference.reference_cache=false``
holds the reference in memory instead and scores each batch as it comes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.lazy import lazy_exports

if TYPE_CHECKING:
    from rlvr.train.preference.batches import LabelledBatch, LabelledObjective, PairBatch, PairObjective, sequence_logps
    from rlvr.train.preference.config import PairsConfig, PreferenceTrainConfig
    from rlvr.train.preference.recipe import PreferenceRecipe
    from rlvr.train.preference.sources import (ExampleSource, LabelledSource, OfflinePairs, OfflinePairSource, OnlinePairSource,
                                               example_source)

# Imported on first use: the config (`.config`) is read without torch, the rest needs it.
__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(["LabelledBatch", "LabelledObjective", "PairBatch", "PairObjective", "sequence_logps"], f"{__name__}.batches"),
    **dict.fromkeys(["PairsConfig", "PreferenceTrainConfig"], f"{__name__}.config"),
    "PreferenceRecipe": f"{__name__}.recipe",
    **dict.fromkeys(["ExampleSource", "LabelledSource", "OfflinePairs", "OfflinePairSource", "OnlinePairSource", "example_source"],
                    f"{__name__}.sources"),
})

__all__ = ["ExampleSource", "LabelledBatch", "LabelledObjective", "LabelledSource", "OfflinePairSource", "OfflinePairs", "OnlinePairSource",
           "PairBatch", "PairObjective", "PairsConfig", "PreferenceRecipe", "PreferenceTrainConfig", "example_source", "sequence_logps"]
