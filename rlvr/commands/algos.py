"""`rlvr algos list [--preset NAME]`: every algorithm preset and its resolved settings;
`rlvr algos show NAME [algo.KEY=VALUE ...]`: one preset resolved, as the YAML a config would hold."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("algos", help="list algorithm presets (grpo, dapo, ...) and their settings")
    s = p.add_subparsers(dest="algos_command", metavar="ACTION", required=True)
    ls = s.add_parser("list", help="print each preset's settings (override any of them with algo.KEY=VALUE)")
    ls.add_argument("--preset", action="append", default=None, help="only this preset (repeatable)")
    ls.set_defaults(func=list_algos)
    show = s.add_parser("show", help="print one preset resolved (every part with all its arguments), with optional overrides")
    show.add_argument("preset", help="preset name (rlvr algos list)")
    show.add_argument("overrides", nargs="*", default=[], help="algo.KEY=VALUE overrides applied over the preset, as rlvr train takes them")
    show.set_defaults(func=show_algo)


def list_algos(args: argparse.Namespace) -> int:
    from rlvr import UserError
    from rlvr.algos.config import preset_names, preset_rows

    names = preset_names()
    wanted = args.preset or names
    unknown = [name for name in wanted if name not in names]
    if unknown:
        raise UserError(f"unknown preset {', '.join(unknown)}; presets: {', '.join(names)}")
    rows = [(name, _flatten(settings)) for name, settings in preset_rows() if name in wanted]
    keys = list(dict.fromkeys(k for _, settings in rows for k in settings))
    key_width = max(len(k) for k in keys)
    widths = [max(len(name), *(len(_fmt(settings.get(k))) for k in keys)) for name, settings in rows]
    print(" " * key_width + "  " + "  ".join(f"{name:<{w}}" for (name, _), w in zip(rows, widths)))
    for k in keys:
        print(f"{k:<{key_width}}  " + "  ".join(f"{_fmt(settings.get(k)):<{w}}" for (_, settings), w in zip(rows, widths)))
    print("\nUse one with algo.preset=NAME and override any row with algo.KEY=VALUE, e.g.\n"
          "  rlvr train quickstart algo.preset=dapo algo.policy_loss.clip_high=0.3\n"
          "`rlvr algos show NAME` prints one preset as the YAML a config holds.")
    return 0


def show_algo(args: argparse.Namespace) -> int:
    import dataclasses

    import yaml

    from rlvr.algos.config import AlgoConfig
    from rlvr.config import ConfigError, build_with_overrides, shown

    # what the overrides apply to: a config with only its algo section, read as rlvr train reads that section
    Shown = dataclasses.make_dataclass("Shown", [("algo", AlgoConfig)])
    spelled = [_in_algo(o) for o in args.overrides]
    try:
        algo = build_with_overrides(Shown, {"algo": {"preset": args.preset}}, "rlvr algos show", spelled).algo
    except ConfigError as e:  # the override as the user typed it (KEY for algo.KEY)
        message = str(e)
        for typed, written in zip(args.overrides, spelled):
            for form in (f"command-line override {shown(written)!r}", f"command-line override {shown(written)}:"):
                if message.startswith(form):
                    message = form.replace(shown(written), shown(typed), 1) + message[len(form):]
                    raise ConfigError(message) from None
        raise
    print(f"# algo.preset={args.preset}" + (" with " + " ".join(args.overrides) if args.overrides else "") + ", resolved")
    print(yaml.safe_dump({"algo": dataclasses.asdict(algo)}, sort_keys=False), end="")
    return 0


def _in_algo(override: str) -> str:
    """``KEY=VALUE`` as an override of the algo section (``algo.KEY=VALUE``); one that names it already, or is no
    ``KEY=VALUE``, as it is."""
    key, sep, _ = override.partition("=")
    key = key.strip()
    if not sep or not key or key == "algo" or key.startswith("algo."):
        return override
    return f"algo.{override.lstrip()}"


def _flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """Sections (a part's arguments, kl, prm...) as one row per entry: ``advantage.gamma``."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if isinstance(v, dict):
            out |= {f"{k}.{sub}": value for sub, value in v.items()}
        else:
            out[k] = v
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
