"""Other hubs' protocols the environment server speaks besides its own (``rlvr envs serve
--dialect``): each names a class built from the `rlvr.serve.env_server.EnvService` whose ``routes()``
are added to rlvr's (and win where both have a path). Kept free of imports so the CLI can list them."""

DIALECTS: dict[str, str] = {
    "nemo-gym": "rlvr.serve.nemo_gym:NeMoGymDialect",
}
