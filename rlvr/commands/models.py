"""`rlvr models list | import PATH.gguf | convert NAME`: the models rlvr knows by name, and GGUF
files converted once into the model cache (`rlvr.models.sources`)."""

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
    print(f"gguf package (needed to convert): {gguf or 'not installed: ' + sources.install_hint()}")
    root = sources.cache_root()
    print(f"model cache (${sources.CACHE_ENV} to move it): {root}")
    found = sources.converted_folders()
    if not found:
        print("  no converted models")
    for folder, record in found:
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        print(f"  {folder.name}  {size / 1e6:.0f} MB  from {record.get('source')} (sha256 {str(record.get('sha256'))[:12]}...)")
    return 0


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
    from rlvr import UserError
    from rlvr.models import sources

    if args.name not in sources.BUILTINS:
        hint = "; for a file use `rlvr models import PATH.gguf`" if args.name.lower().endswith(sources.GGUF_SUFFIX) else ""
        raise UserError(f"unknown built-in model {args.name!r}; built-ins: {', '.join(sources.BUILTINS)}{hint}")
    print(sources.resolve_source(args.name))
    return 0
