"""The documentation (README.md, mkdocs.yml, docs/) stays true to the code.

- the site builds with `mkdocs build --strict` (a broken link or anchor, or a page missing from the
  nav, fails it);
- every fenced ```yaml block parses, and a block that is a training config uses only real keys;
- every `rlvr ...` command line in a fenced shell block parses with rlvr's own argument parser, and
  its `key=value` overrides name keys of a config class;
- no shipped config (rlvr/configs/*.yaml) and no config block, command line or inline ``key=value`` of
  the docs uses an old key spelling the config system still reads (`rlvr.train.recipes.legacy_keys`);
- the README's links into docs/ resolve to files;
- the generated configuration reference and preset tables match the code;
- the separate-package example of docs/environments/own-package.md installs its entry points and
  passes `rlvr envs check`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
SHELLS = {"bash", "sh", "shell", "console"}


def blocks(path: Path, languages: set[str]) -> list[tuple[int, str, str]]:
    """(line, info string, body) of each fenced block whose language is in ``languages``."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        if info.split(" ")[0] in languages:
            body = "\n".join(line[len(m.group("indent")):] for line in m.group("body").split("\n"))
            out.append((text.count("\n", 0, m.start()) + 1, info, body))
    return out


def test_there_are_pages():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"index.md", "getting-started.md", "concepts.md", "algorithms.md", "reference/config.md", "reference/configs.md",
            "reference/tasks.md", "reference/metrics.md", "environments/own-package.md", "benchmarks.md", "where-run.md"} <= names


def test_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[docs]'; scripts/setup_env.sh installs them)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "compare_algos.png").is_file()


# -- YAML -------------------------------------------------------------------------------------------

def _config_keys() -> set[str]:
    from rlvr.config import describe
    from rlvr.train.recipes import RECIPES, config_class

    return {key for name in RECIPES.ids() for key, _, _ in describe(config_class(name))}


def _algo_problem(algo: dict) -> str | None:
    """Why an ``algo`` mapping does not resolve (its part sections take their functions' arguments,
    so they are checked by resolving them), or None."""
    import warnings

    from rlvr.algos.config import AlgoConfig
    from rlvr.config import ConfigError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            AlgoConfig.from_config(algo)
    except ConfigError as e:
        return str(e)
    return None


def _flatten(d: dict, prefix: str = "") -> list[str]:
    keys = []
    for k, v in d.items():
        if f"{prefix}{k}" == "algo":
            continue  # checked by resolving it (_algo_problem)
        if isinstance(v, dict) and f"{prefix}{k}" not in ("task.config", "task.env_kwargs"):
            keys += _flatten(v, f"{prefix}{k}.")
        else:
            keys.append(f"{prefix}{k}")
    return keys


def test_yaml_blocks_parse():
    found = [(p, line, body) for p in [*PAGES, ROOT / "README.md"] for line, _, body in blocks(p, {"yaml", "yml"})]
    assert found, "the docs show at least one config file"
    keys = _config_keys()
    for path, line, body in found:
        try:
            data = yaml.safe_load(body)
        except yaml.YAMLError as e:
            pytest.fail(f"{path.relative_to(ROOT)}:{line}: YAML does not parse: {e}")
        if isinstance(data, dict) and ("recipe" in data or "algo" in data or "task" in data):  # a training config
            unknown = [k for k in _flatten(data) if k not in keys]
            assert not unknown, f"{path.relative_to(ROOT)}:{line}: config keys that do not exist: {unknown}"
            problem = _algo_problem(data["algo"]) if isinstance(data.get("algo"), dict) else None
            assert problem is None, f"{path.relative_to(ROOT)}:{line}: {problem}"


# -- rlvr command lines -----------------------------------------------------------------------------

def command_lines(path: Path) -> list[tuple[int, list[str]]]:
    """The argument lists after `rlvr` (or `-m rlvr.cli`) on each command line of the shell blocks."""
    return [(line, argv) for line, _, argv in shell_commands(path)]


def shell_commands(path: Path) -> list[tuple[int, list[str], list[str]]]:
    """``(line, words before rlvr's arguments, rlvr's arguments)`` of each `rlvr` (or `-m rlvr.cli`)
    command line in the shell blocks: the words before say how it is launched (``.venv-vllm/bin/rlvr``,
    ``accelerate launch ... -m rlvr.cli``)."""
    out = []
    for start, _, body in blocks(path, SHELLS):
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            line_no, line = start + 1 + i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):  # continuation lines
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            line = re.sub(r"^\s*\$ ", "", line)
            try:
                words = shlex.split(line, comments=True)
            except ValueError as e:
                pytest.fail(f"{path.relative_to(ROOT)}:{line_no}: cannot split {line!r}: {e}")
            for j, w in enumerate(words):
                if w == "rlvr" or w.endswith("/rlvr") or (w == "rlvr.cli" and j > 0 and words[j - 1] == "-m"):
                    out.append((line_no, words[:j + 1], words[j + 1:]))
                    break
    return out


def parse_rlvr(argv: list[str]):
    """Parse as `rlvr.cli.main` does (key=value overrides may follow options); raise on an error."""
    from rlvr.cli import build_parser

    parser = build_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args, extra = parser.parse_known_args(argv)
    except SystemExit:
        raise AssertionError(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exited")
    if getattr(args, "intermixed", False):
        args.overrides = [*args.overrides, *(x for x in extra if "=" in x and not x.startswith("-"))]
        extra = [x for x in extra if not ("=" in x and not x.startswith("-"))]
    assert not extra, f"unrecognized arguments: {' '.join(extra)}"
    assert getattr(args, "func", None), "no subcommand"
    return args


def test_rlvr_command_lines_parse():
    keys = _config_keys()
    checked, problems = 0, []
    for path in [*PAGES, ROOT / "README.md"]:
        for line, argv in command_lines(path):
            where = f"{path.relative_to(ROOT)}:{line}: rlvr {' '.join(argv)}"
            try:
                args = parse_rlvr(argv)
            except AssertionError as e:
                problems.append(f"{where}\n    {e}")
                continue
            overrides = list(getattr(args, "overrides", None) or [])
            if getattr(args, "algos_command", None) == "show":
                overrides.append(f"algo.preset={args.preset}")
            for override in overrides:
                key = override.split("=", 1)[0]
                if key not in keys and not key.startswith("algo."):
                    problems.append(f"{where}\n    override {override!r}: no config key {key!r}")
            algo = [o[len("algo."):] for o in overrides if o.startswith("algo.")]
            if algo:
                from rlvr.algos.config import AlgoConfig
                from rlvr.config import apply_overrides

                problem = _algo_problem(apply_overrides(AlgoConfig, {}, algo))
                if problem:
                    problems.append(f"{where}\n    {problem}")
            checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 30, f"only {checked} rlvr command lines found in the docs"


def test_the_command_check_catches_mistakes():
    with pytest.raises(AssertionError):
        parse_rlvr(["trian", "quickstart"])
    with pytest.raises(AssertionError):
        parse_rlvr(["eval", "--model", "m", "--task", "t", "--no-such-flag"])
    assert parse_rlvr(["train", "quickstart", "--resume", "optim.lr=1e-5"]).overrides == ["optim.lr=1e-5"]


# -- current key spellings only ---------------------------------------------------------------------

INLINE_OVERRIDE = re.compile(r"`([a-z_]+(?:\.[a-z0-9_]+)+)=([^`]*)`")


def _dotted(data: dict, prefix: str = "") -> list[str]:
    """Every key of a config mapping, nested ones dotted (a task's own config is not a config key)."""
    keys = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        keys.append(key)
        if isinstance(v, dict) and key not in ("task.config", "task.env_kwargs"):
            keys += _dotted(v, f"{key}.")
    return keys


def _override_keys(item: str, prefix: str = "") -> list[str]:
    """The keys a ``key=value`` override sets: the key, and those of a mapping value (``algo.kl={mode: off}``)."""
    key, _, raw = item.partition("=")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = None
    return [prefix + key, *(_dotted(value, f"{prefix}{key}.") if isinstance(value, dict) else [])]


def legacy_spellings(keys: list[str]) -> list[str]:
    """``"old (now new)"`` for each key that is, or lies under, an old spelling."""
    from rlvr.train.recipes import legacy_keys

    legacy = legacy_keys()
    return [f"{k} (now {legacy[old]})" for k in keys for old in legacy if k == old or k.startswith(old + ".")]


def old_spellings_on(path: Path) -> list[str]:
    """Old key spellings in a page's config blocks, `rlvr` command lines and inline ``key=value`` code."""
    found = []
    for line, _, body in blocks(path, {"yaml", "yml"}):
        data = yaml.safe_load(body)
        if isinstance(data, dict):
            found += [f"{path.name}:{line}: {k}" for k in legacy_spellings(_dotted(data))]
    for line, argv in command_lines(path):
        try:
            args = parse_rlvr(argv)
        except AssertionError:
            continue  # test_rlvr_command_lines_parse reports it
        keys = [k for o in getattr(args, "overrides", None) or [] for k in _override_keys(o)]
        keys += [k for o in getattr(args, "rollout", None) or [] for k in _override_keys(o, "rollout.")]
        found += [f"{path.name}:{line}: {k}" for k in legacy_spellings(keys)]
    text = path.read_text()
    for m in INLINE_OVERRIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found += [f"{path.name}:{line}: {k}" for k in legacy_spellings(_override_keys(f"{m.group(1)}={m.group(2)}"))]
    return found


def test_shipped_configs_and_the_docs_use_current_key_spellings():
    from rlvr.config import CONFIG_DIR

    problems = []
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        problems += [f"rlvr/configs/{path.name}: {k}" for k in legacy_spellings(_dotted(yaml.safe_load(path.read_text()) or {}))]
    for path in [*PAGES, ROOT / "README.md"]:
        problems += old_spellings_on(path)
    assert not problems, "old key spellings:\n" + "\n".join(problems)


def test_the_spelling_check_finds_old_keys(tmp_path):
    assert legacy_spellings(["algo.kl.mode", "algo.kl_mode", "algo.advantage_kwargs.eps", "rollout.hf.decode"]) == [
        "algo.kl_mode (now algo.kl.mode)", "algo.advantage_kwargs.eps (now algo.advantage (the estimator's arguments))"]
    page = tmp_path / "page.md"
    page.write_text("Set `algo.correction.kind=tis` here.\n\n```yaml\nalgo:\n  kl_mode: \"off\"\nrollout:\n  hf_decode: kv\n```\n\n"
                    "```bash\nrlvr train quickstart algo.clip_high=0.3 'algo.correction={kind: mis}'\n"
                    "rlvr eval --model m --task arithmetic-v1 --rollout max_batch_sequences=64\n```\n")
    found = old_spellings_on(page)
    assert [f.split(": ", 1)[1].split(" (")[0] for f in found] == [
        "algo.kl_mode", "rollout.hf_decode", "algo.clip_high", "algo.correction.kind", "rollout.max_batch_sequences", "algo.correction.kind"]


# -- links ------------------------------------------------------------------------------------------

def test_readme_links_into_docs_resolve():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert any(link.startswith("docs/") for link in local), "the README links into docs/"
    missing = [link for link in local if not (ROOT / link.split("#")[0]).exists()]
    assert not missing, f"README links to missing files: {missing}"


# -- generated pages --------------------------------------------------------------------------------

def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "scripts" / "gen_config_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_generated_reference_is_up_to_date():
    gen = _generator()
    for path, text in gen.generated().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is out of date: run python scripts/gen_config_reference.py"
    from rlvr.algos.config import PRESETS

    shown = {n for names in re.findall(r"<!-- presets: ([a-z_,]+) -->", (DOCS / "algorithms.md").read_text()) for n in names.split(",")}
    assert shown == set(PRESETS), f"docs/algorithms.md does not show presets {sorted(set(PRESETS) - shown)}"


def test_every_builtin_config_says_what_it_is_for_and_dates_its_measured_times(tmp_path):
    from rlvr.config import CONFIG_DIR

    gen = _generator()
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        purpose, measured = gen.config_header(path)
        assert len(purpose) > 20 and purpose.endswith("."), f"{path.name}: the header comment starts with what the config is for"
        for line in measured:
            assert re.search(r"\(\d{4}-\d\d-\d\d", line), f"{path.name}: '# Measured: {line}' names the date it was measured (YYYY-MM-DD)"
    header = "# GRPO on X, from Y.yaml: more.\n# Measured: 12 s on one core (2026-01-02)\n#   rlvr train x\nname: x\n"
    (tmp_path / "x.yaml").write_text(header)
    assert gen.config_header(tmp_path / "x.yaml") == ("GRPO on X, from Y.yaml: more.", ["12 s on one core (2026-01-02)"])


# -- the separate package example -------------------------------------------------------------------

def test_own_package_example_registers_through_entry_points_and_passes_the_checks(tmp_path):
    page = DOCS / "environments" / "own-package.md"
    files = {}
    for _, info, body in blocks(page, {"python", "toml", "text"}):
        m = re.search(r'title="([^"]+)"', info)
        if m:
            files[m.group(1)] = body
    assert {"pyproject.toml", "acme_rlvr/envs.py", "acme_rlvr/tasks.py", "acme_rlvr/data/trivia.jsonl"} <= set(files)
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    (tmp_path / "acme_rlvr" / "__init__.py").write_text("")
    # what `pip install` would write: the distribution's metadata with its entry points
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads(files["pyproject.toml"])["project"]
    info = tmp_path / "acme_rlvr-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    assert set(groups) == {"rlvr.envs", "rlvr.tasks"}
    (info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}

    def rlvr(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rlvr.cli", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    listed = rlvr("envs", "list")
    assert listed.returncode == 0 and "warning" not in listed.stdout, listed.stdout + listed.stderr
    assert re.search(r"acme/yes-no-v1\s+acme-rlvr\s.*acme/palindromes-v1, acme/trivia-v1", listed.stdout), listed.stdout
    checked = rlvr("envs", "check", "acme/yes-no-v1", "-n", "5")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "all checks passed" in checked.stdout and "[skip]" not in checked.stdout and "not applicable" not in checked.stdout, checked.stdout
