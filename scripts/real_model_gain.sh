#!/usr/bin/env bash
# RL on a real pretrained model, with its format-only control and the gain beyond format.
#
#   scripts/real_model_gain.sh [OUT]        (default OUT: runs/real-model-gain)
#
# 1. greedy accuracy of SmolLM2-135M-Instruct on arithmetic-v1's frozen test split (500 problems);
# 2. `rlvr train smollm2_arithmetic`: GRPO rewarded for correct answers;
# 3. the same config rewarded for format only (verify.reward=format: 1 for any well-formed answer);
# 4. greedy accuracy of both trained models on the same problems;
# 5. `rlvr compare`: accuracies and paired 95% intervals of every difference. "trained − before" is
#    the gain, "format-control − before" what format alone gives, "trained − format-control" the
#    gain beyond format.
# Extra arguments after OUT are overrides for both training runs (e.g. update.steps=20).
# Needs the model (`rlvr models install smollm2-135m-instruct`); about two hours on 2 CPU cores.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLVR=${RLVR:-$ROOT/.venv/bin/rlvr}
OUT=${1:-runs/real-model-gain}
shift || true
MODEL=smollm2-135m-instruct
EVAL=(--task arithmetic-v1 --split test --max-new-tokens 48)

"$RLVR" eval --model "$MODEL" "${EVAL[@]}" --out "$OUT/eval/before"
"$RLVR" train smollm2_arithmetic "output_dir=$OUT" "$@"
"$RLVR" train smollm2_arithmetic "output_dir=$OUT" name=smollm2_arithmetic_format verify.reward=format "$@"
"$RLVR" eval --model "$OUT/smollm2_arithmetic/final" "${EVAL[@]}" --out "$OUT/eval/trained"
"$RLVR" eval --model "$OUT/smollm2_arithmetic_format/final" "${EVAL[@]}" --out "$OUT/eval/format-control"
"$RLVR" compare "$OUT/eval/before" "$OUT/eval/format-control" "$OUT/eval/trained" --labels before,format-control,trained \
  | tee "$OUT/gain.md"
