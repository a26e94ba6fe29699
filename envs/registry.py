"""One registry mechanism for everything that is looked up by name: environments, tasks, algorithm
parts. It lives in the lowest package that needs it so every layer above can share it.

Ids follow ``[namespace/]name[-vN]``. A versioned registry requires the version at registration;
looking up a bare name resolves to its latest version. An entry is registered with either the
object itself or a lazy ``"module:attribute"`` string, so listing never imports heavy code.
Third-party packages add entries through an entry-point group (``rlvr.envs``, ``rlvr.tasks``,
``rlvr.algos`` for algorithm parts and presets): each entry point names a module or a no-argument
callable that calls ``register`` when loaded (once, even where several registries share a group).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")

_ID_RE = re.compile(r"^(?:(?P<namespace>[A-Za-z0-9_.\-]+)/)?(?P<name>[A-Za-z0-9_.\-]+?)(?:-v(?P<version>\d+))?$")


class RegistryError(LookupError):
    """A registry lookup or registration failed; the message says what to do."""


@dataclass(frozen=True)
class ParsedId:
    namespace: str | None
    name: str
    version: int | None

    @property
    def base(self) -> str:
        """The id without its version (``namespace/name``)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.base if self.version is None else f"{self.base}-v{self.version}"


def parse_id(id: str) -> ParsedId:
    """Split ``[namespace/]name[-vN]`` into its parts; raise `RegistryError` if malformed."""
    m = _ID_RE.match(id.strip())
    if not m:
        raise RegistryError(f"malformed id {id!r}: expected '[namespace/]name[-vN]', e.g. 'math-v1' or 'acme/sudoku-v2'")
    version = m.group("version")
    return ParsedId(m.group("namespace"), m.group("name"), int(version) if version is not None else None)


@dataclass(frozen=True)
class Spec(Generic[T]):
    """What is registered under one id.

    Attributes:
        id: The full id (``namespace/name-vN``).
        entry_point: The factory (class or function), or a lazy ``"module:attribute"`` string.
        kwargs: Default keyword arguments for the factory; `Registry.make` overrides them.
        description: One line shown by listings without importing the entry point.
        source: Who registered it (``"builtin"`` or the distribution of an entry point).
    """

    id: str
    entry_point: Callable[..., T] | str
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: str = ""

    @property
    def parsed(self) -> ParsedId:
        return parse_id(self.id)

    def load(self) -> Callable[..., T]:
        """Import and return the factory."""
        if not isinstance(self.entry_point, str):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        if not attr:
            raise RegistryError(f"{self.id}: entry point {self.entry_point!r} must look like 'package.module:attribute'")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise RegistryError(f"{self.id}: cannot load entry point {self.entry_point!r}: {e}") from e
        return obj


class Registry(Generic[T]):
    """Named factories of one kind (``"environment"``, ``"task"``, ``"advantage estimator"``...)."""

    def __init__(self, kind: str, *, entry_point_group: str | None = None, versioned: bool = True):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.versioned = versioned
        self._specs: dict[str, Spec[T]] = {}
        self._plugins_loaded = entry_point_group is None
        self.plugin_errors: list[str] = []
        self._loading_source: str | None = None  # the distribution whose entry point is loading

    # -- registration -------------------------------------------------------------------------

    def register(
        self,
        id: str,
        entry_point: Callable[..., T] | str | None = None,
        *,
        description: str = "",
        kwargs: dict[str, Any] | None = None,
        override: bool = False,
        source: str | None = None,
    ) -> Any:
        """Register ``entry_point`` under ``id``; without ``entry_point`` return a decorator.

        ``@registry.register("acme/sudoku-v1")`` on a class or function, or
        ``registry.register("acme/sudoku-v1", "acme.sudoku:SudokuEnv")`` for a lazy import.
        Registering an id twice is an error unless ``override=True``.
        """
        parsed = parse_id(id)
        if self.versioned and parsed.version is None:
            raise RegistryError(f"{self.kind} id {id!r} has no version: register it as '{parsed.base}-v1'")
        if not self.versioned and parsed.version is not None:
            raise RegistryError(f"{self.kind} names are not versioned: use {parsed.base!r}, not {id!r}")
        key = str(parsed)

        def add(obj: Callable[..., T] | str) -> Callable[..., T] | str:
            if key in self._specs and not override:
                raise RegistryError(f"{self.kind} {key!r} is already registered (by {self._specs[key].source}); pass override=True to replace it")
            desc = description or _first_doc_line(obj)
            origin = source or self._loading_source or "python"
            self._specs[key] = Spec(key, obj, dict(kwargs or {}), desc, origin)
            return obj

        if entry_point is None:
            return add
        add(entry_point)
        return self._specs[key]

    def unregister(self, id: str) -> None:
        self._specs.pop(str(parse_id(id)), None)

    # -- lookup -------------------------------------------------------------------------------

    def spec(self, id: str) -> Spec[T]:
        """The spec for ``id``. A bare name resolves to its latest version.

        Unknown ids raise `RegistryError` naming the versions that exist and close matches.
        """
        self._load_plugins()
        parsed = parse_id(id)
        key = str(parsed)
        if key in self._specs:
            return self._specs[key]
        versions = sorted(
            (s.parsed.version or 0, s) for s in self._specs.values() if s.parsed.base == parsed.base
        )
        if versions and parsed.version is None:
            return versions[-1][1]
        if versions:
            have = ", ".join(s.id for _, s in versions)
            raise RegistryError(f"{self.kind} {key!r} does not exist; registered versions of {parsed.base!r}: {have}")
        close = difflib.get_close_matches(key, list(self._specs), n=3, cutoff=0.5)
        by_base = {s.parsed.base: s.id for s in self._specs.values()}
        close += [by_base[b] for b in difflib.get_close_matches(parsed.base, list(by_base), n=3, cutoff=0.6) if by_base[b] not in close]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        command = {"environment": "envs", "task": "tasks"}.get(self.kind)
        listing = f" See `rlvr {command} list`." if command else ""
        raise RegistryError(f"unknown {self.kind} {key!r}.{hint}{listing}")

    def make(self, id: str, **kwargs: Any) -> T:
        """Build the registered object: ``factory(**{**spec.kwargs, **kwargs})``.

        If the result has a writable ``id`` attribute it is set to the resolved id.
        """
        spec = self.spec(id)
        obj = spec.load()(**{**spec.kwargs, **kwargs})
        try:
            obj.id = spec.id  # type: ignore[attr-defined]
        except AttributeError:
            pass
        return obj

    def get(self, id: str) -> Callable[..., T]:
        """The registered factory itself (for function registries such as loss parts)."""
        return self.spec(id).load()

    def __contains__(self, id: str) -> bool:
        try:
            self.spec(id)
        except RegistryError:
            return False
        return True

    def specs(self) -> list[Spec[T]]:
        self._load_plugins()
        return sorted(self._specs.values(), key=lambda s: s.id)

    def ids(self) -> list[str]:
        return [s.id for s in self.specs()]

    def registered_ids(self) -> list[str]:
        """The ids registered so far, without loading plugins (for help texts built at import time,
        when a plugin importing the module that builds them would find it half initialised)."""
        return sorted(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    # -- plugins ------------------------------------------------------------------------------

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # set first: plugins call register(), which must not recurse here
        for ep in importlib.metadata.entry_points(group=self.entry_point_group or ""):
            dist = getattr(ep.dist, "name", None) or "unknown distribution"
            self._loading_source = dist
            try:
                loaded = ep.load()
                # registries may share a group (the algorithm parts share rlvr.algos): a callable runs once
                if callable(loaded) and not isinstance(loaded, type(importlib)) and (self.entry_point_group, ep.value) not in _CALLED:
                    _CALLED.add((self.entry_point_group, ep.value))
                    loaded()
            except Exception as e:  # a broken plugin must not hide the others
                msg = f"{self.entry_point_group} entry point {ep.name!r} ({ep.value}, from {dist}) failed to load: {type(e).__name__}: {e}"
                self.plugin_errors.append(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=3)
            finally:
                self._loading_source = None


_CALLED: set[tuple[str | None, str]] = set()  # (group, entry point value) of the callables already run


def _first_doc_line(obj: Any) -> str:
    if isinstance(obj, str):
        return ""
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
