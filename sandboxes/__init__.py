"""Run untrusted code: backends, limits, pools. (Built in its own issue.)"""
