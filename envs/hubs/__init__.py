"""Other hubs' environments as rlvr environments (the task ids of `tasks.hubs` bind them)."""
