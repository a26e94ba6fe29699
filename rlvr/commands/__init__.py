"""Subcommands of the `rlvr` CLI, one module each (discovered automatically)."""
