"""Held-out evaluation: metrics (`metrics`) and the runner behind `rlvr eval` (`runner`)."""
