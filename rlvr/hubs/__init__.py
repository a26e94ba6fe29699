"""rlvr environments exported to other hubs' formats, and theirs imported as rlvr tasks.

Export (``rlvr envs export ID --to HUB --out DIR``, or `export`): a registered environment and its
task's problems become what the hub loads:

=============  ===============================================  ============  ================
hub            what is written                                  multi-turn    runs with
=============  ===============================================  ============  ================
verifiers      a ``vf.Taskset`` package (v1)                    yes           ``vf-eval``
skyrl-gym      a ``BaseTextEnv`` package + parquet rows         yes           ``skyrl_gym.make``
openenv        an OpenEnv package forwarding to rlvr's server   yes           OpenEnv's client
nemo-gym       rows + config; rlvr's server is the resources    no            ``/verify``
               server (``--dialect nemo-gym``)
harbor         one task folder per problem                      no            ``tests/test.sh``
=============  ===============================================  ============  ================

The verdict always comes from rlvr's own environment (the same reward, reason and timeout): the
verifiers, SkyRL-Gym and Harbor exports call rlvr in process (rlvr installed beside the hub); the
OpenEnv and NeMo Gym exports call rlvr's environment server (`rlvr.serve`), so the hub's package
needs no environment shared with rlvr's (they send ``{split, index, checksum}``: the answer stays on
the server). Splits are written as separate frozen files with their checksums, so train and test
stay disjoint; the exported code carries the checksums and each hub's runtime refuses data that no
longer matches, naming the file. Sessions play the first training split unless one is named.

Import: task ids ``verifiers:NAME``, ``skyrl-gym:NAME``, ``nemo-gym:CONFIG``, ``openenv:URL`` and
``harbor:DIR`` make a hub's environment an rlvr task (`tasks.hubs`).
"""

from __future__ import annotations

import importlib

from rlvr import UserError
from dataclasses import dataclass


class HubError(UserError):
    """An export or import cannot be done as asked; the message names the feature or the package."""


@dataclass(frozen=True)
class Hub:
    """A hub rlvr exports to.

    Attributes:
        module: The module with ``export(request) -> ExportResult``.
        package: The hub's Python distribution (for the message when it is missing).
        extra: rlvr's extra that installs it ("" when its own package cannot run here).
        multi_turn: Whether its format has turns (a multi-turn environment is refused otherwise).
    """

    module: str
    package: str
    extra: str
    multi_turn: bool


HUBS: dict[str, Hub] = {
    "verifiers": Hub("rlvr.hubs.verifiers", "verifiers", "hubs", True),
    "skyrl-gym": Hub("rlvr.hubs.skyrl_gym", "skyrl-gym", "hubs", True),
    "openenv": Hub("rlvr.hubs.openenv", "openenv-core", "", True),
    "nemo-gym": Hub("rlvr.hubs.nemo_gym", "nemo-gym", "", False),
    "harbor": Hub("rlvr.hubs.harbor", "harbor", "", False),
}


def hub(name: str) -> Hub:
    if name not in HUBS:
        raise HubError(f"unknown hub {name!r}; hubs: {', '.join(sorted(HUBS))}")
    return HUBS[name]


def require(module: str, hub_name: str):
    """Import ``module`` of hub ``hub_name``'s package, or raise `HubError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        h = hub(hub_name)
        how = f"pip install 'rlvr[{h.extra}]'" if h.extra else f"pip install {h.package}"
        raise HubError(f"{hub_name}: the {h.package!r} package is not installed ({e}); install it with: {how}") from e


def export(hub_name: str, env_id: str, task, out, **options):
    """Export ``env_id`` (with ``task``'s problems) to ``hub_name``'s format in folder ``out``;
    returns the hub module's `rlvr.hubs.common.ExportResult`."""
    from rlvr.hubs.common import ExportRequest

    h = hub(hub_name)
    request = ExportRequest.make(hub_name, env_id, task, out, **options)
    if request.multi_turn and not h.multi_turn:
        raise HubError(f"{hub_name} cannot express multi-turn episodes ({env_id} is a multi-turn environment); "
                       f"export it to one of: {', '.join(n for n, x in sorted(HUBS.items()) if x.multi_turn)}")
    return importlib.import_module(h.module).export(request)


__all__ = ["HUBS", "Hub", "HubError", "export", "hub", "require"]
