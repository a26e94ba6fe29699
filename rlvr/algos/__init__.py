"""Algorithm parts as small pure tensor functions in registries, and presets that combine them.

- `advantages`: outcome/process rewards -> token advantages ``[B, T]``
- `ratio`: importance ratios (per token, per sequence, none)
- `losses`: clipped policy surrogates
- `kl`: KL estimators to a reference policy
- `aggregation`: token losses -> one scalar, invariant to micro-batching
- `presets`: named algorithms as tables of settings
"""
