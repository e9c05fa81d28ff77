"""The PEP 517 build backend of the `snapbus` Python package (`pip install ./python`,
`pip wheel ./python`, `pip install -e ./python`).

One wheel for every CPython from 3.8 on, tagged `cp38-abi3`, that carries:

- four builds of the native module `snapbus._snapbus`: `snapbus/_py311/` on the stable ABI
  for CPython 3.11 and every later version, and `snapbus/_cp38/`, `_cp39/`, `_cp310/` on each
  version's full API (the stable ABI has no buffer protocol before 3.11 and no vectorcall
  before 3.10: a stable-ABI build for 3.8 took 1.5x as long per snapshot, 2.4x with an
  array); `snapbus/_native.py` imports the one for the running interpreter;
- the `snapbus` command-line binary, installed on the environment's PATH (`<venv>/bin`).

So `pip wheel ./python` runs once where Rust is, and its wheel installs on every node and
interpreter of a lab without Rust. maturin packs one extension module per wheel, which is why
this backend drives cargo itself; it needs nothing from PyPI but `tomli` on CPython < 3.11.

The build takes minutes (a release build of the workspace). Its progress goes to the terminal
(`/dev/tty`) while pip hides the backend's output; all of cargo's output goes to stderr, which
pip shows with `-v` or when the build fails.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path
from typing import IO, Any, Dict, Iterator, List, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYTHON_DIR = Path(__file__).resolve().parent.parent
ROOT = PYTHON_DIR.parent
PACKAGE = PYTHON_DIR / "snapbus"
# The builds of the native module: directory in the package -> (the cargo feature of a
# stable-ABI build or None, the CPython version it is built for: the oldest it loads into).
VARIANTS: Dict[str, Tuple[Optional[str], str]] = {
    "_py311": ("abi3-py311", "3.11"),
    "_cp38": (None, "3.8"),
    "_cp39": (None, "3.9"),
    "_cp310": (None, "3.10"),
}
WHEEL_TAG_PYTHON = "cp38-abi3"


class BuildError(RuntimeError):
    """What went wrong, with what to do about it."""


# PEP 517 and PEP 660 hooks ------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(
    config_settings: Optional[Dict[str, Any]] = None,
) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """Every native build and the CLI, packed with the Python sources."""
    started = time.monotonic()
    built = _cargo_build(list(VARIANTS), with_cli=True)
    files: List[Tuple[str, bytes, int]] = list(_sources())
    for variant, so in built.items():
        if variant != "cli":
            files.append((f"snapbus/{variant}/_snapbus.abi3.so", so.read_bytes(), 0o755))
    files.append((f"{_dist()}.data/scripts/snapbus", built["cli"].read_bytes(), 0o755))
    name = _write_wheel(Path(wheel_directory), files)
    _progress(f"snapbus: wheel {name} built in {_minutes(started)}")
    return name


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    """The native build for this interpreter, in place in `python/snapbus/`, and a wheel that
    points the environment at `python/` (the CLI stays with cargo: `target/*/snapbus`)."""
    started = time.monotonic()
    variant = variant_for(sys.version_info[:2])
    built = _cargo_build([variant], with_cli=False)
    target = PACKAGE / variant / "_snapbus.abi3.so"
    target.parent.mkdir(exist_ok=True)
    tmp = target.with_suffix(".tmp")
    shutil.copyfile(built[variant], tmp)
    os.replace(tmp, target)
    pth = (f"__editable__.{_dist()}.pth", (str(PYTHON_DIR) + "\n").encode(), 0o644)
    name = _write_wheel(Path(wheel_directory), [pth])
    _progress(f"snapbus: editable install of {PYTHON_DIR} built in {_minutes(started)}")
    return name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    raise BuildError(
        "snapbus has no source distribution: its build needs the whole cargo workspace. "
        "Build a wheel from a clone (`pip wheel ./python`) and install that wheel anywhere."
    )


# cargo ---------------------------------------------------------------------------------------


def _cargo() -> str:
    cargo = os.environ.get("CARGO") or shutil.which("cargo")
    if not cargo:
        raise BuildError(
            "snapbus: building from source needs Rust 1.88 or newer (`cargo` on PATH; "
            "https://rustup.rs). A wheel built elsewhere (`pip wheel ./python`) installs "
            "without Rust: `pip install snapbus-*.whl`."
        )
    if not (ROOT / "Cargo.toml").is_file() or not (ROOT / "Cargo.lock").is_file():
        raise BuildError(
            f"snapbus: {ROOT} is not the snapbus workspace (no Cargo.toml / Cargo.lock beside "
            "python/): build from a clone of the repository."
        )
    return cargo


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target").resolve()


def variant_for(version: Tuple[int, ...]) -> str:
    """The build a CPython version imports (as `snapbus/_native.py` chooses)."""
    return "_py311" if version >= (3, 11) else f"_cp3{version[1]}"


def _pyo3_config(variant: str) -> Path:
    """A pyo3 configuration for the variant's CPython: built without that interpreter, and
    without linking libpython (an extension module finds it in the process)."""
    feature, version = VARIANTS[variant]
    path = _target_dir() / "pyo3" / f"{variant}.cfg"
    abi = f"target_abi=CPython-abi3-{version}\n" if feature else ""
    text = (
        "implementation=CPython\n"
        f"version={version}\n"
        "shared=true\n"
        f"{abi}"
        "suppress_build_script_link_lines=true\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _cargo_build(variants: List[str], with_cli: bool) -> Dict[str, Path]:
    """Builds each variant (and the CLI with the first), returning the files to pack. The
    CLI and the module build in one cargo run so their shared crates build once."""
    cargo = _cargo()
    release = _target_dir() / "release"
    built: Dict[str, Path] = {}
    for i, variant in enumerate(variants):
        feature, version = VARIANTS[variant]
        args = [cargo, "build", "--release", "--locked", "-p", "snapbus-python"]
        if feature:
            args += ["--features", f"snapbus-python/{feature}"]
        if with_cli:
            # With the CLI in every run, the crates both use keep one set of features (no
            # rebuild between the runs).
            args += ["-p", "snapbus-cli"]
        env = dict(os.environ)
        env["PYO3_CONFIG_FILE"] = str(_pyo3_config(variant))
        env["PYO3_BUILD_EXTENSION_MODULE"] = "1"
        what = f"the native module for CPython {version}" + (" and later" if feature else "")
        if with_cli and i == 0:
            what += " and the snapbus command"
        _run_cargo(args, env, what)
        staged = _target_dir() / "pyo3" / variant / "_snapbus.abi3.so"
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release / "lib_snapbus.so", staged)
        built[variant] = staged
    if with_cli:
        built["cli"] = release / "snapbus"
    return built


def _run_cargo(args: List[str], env: Dict[str, str], what: str) -> None:
    started = time.monotonic()
    _progress(f"snapbus: building {what} with cargo (release; minutes on a cold build)…")
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=sys.stderr,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    assert proc.stderr is not None
    tail: List[str] = []
    compiled, last_report = 0, started
    for line in proc.stderr:
        sys.stderr.write(line)
        tail = [*tail[-39:], line.rstrip()]
        words = line.split()
        if words[:1] == ["Compiling"] and len(words) > 1:
            compiled += 1
            now = time.monotonic()
            if now - last_report >= 10:
                last_report = now
                _progress(f"  {compiled} crates compiled ({_minutes(started)}), now {words[1]}")
    if proc.wait() != 0:
        raise BuildError(
            f"snapbus: cargo failed building {what} (exit {proc.returncode}):\n" + "\n".join(tail)
        )
    _progress(f"  done: {compiled} crates compiled in {_minutes(started)}")


_TTY: Optional[IO[str]] = None


def _progress(message: str) -> None:
    """A line for the person waiting: to the terminal when pip is hiding stderr."""
    global _TTY
    print(message, file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        return
    if _TTY is None:
        try:
            _TTY = open("/dev/tty", "w")
        except OSError:
            return
    _TTY.write(message + "\n")
    _TTY.flush()


def _minutes(since: float) -> str:
    s = int(time.monotonic() - since)
    return f"{s // 60}m{s % 60:02d}s"


# the wheel -----------------------------------------------------------------------------------


def _project() -> Dict[str, Any]:
    with open(PYTHON_DIR / "pyproject.toml", "rb") as f:
        project: Dict[str, Any] = tomllib.load(f)["project"]
    return project


def _version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    m = re.search(r"^\[workspace\.package\][^\[]*?^version\s*=\s*\"([^\"]+)\"", text, re.M)
    if not m:
        raise BuildError("snapbus: no version in [workspace.package] of Cargo.toml")
    return m.group(1)


def _dist() -> str:
    return f"snapbus-{_version()}"


def _sources() -> Iterator[Tuple[str, bytes, int]]:
    """The package's Python files (not the native builds an editable install left in place)."""
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PYTHON_DIR)
        if path.is_dir() or "__pycache__" in rel.parts or path.suffix in (".so", ".pyc", ".tmp"):
            continue
        yield rel.as_posix(), path.read_bytes(), 0o644


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        "Name: snapbus",
        f"Version: {_version()}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
        f"License: {p['license']['text']}",
    ]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            req, _, marker = dep.partition(";")
            marker = f"({marker.strip()}) and " if marker.strip() else ""
            lines.append(f'Requires-Dist: {req.strip()}; {marker}extra == "{extra}"')
    return "\n".join(lines) + "\n"


def _platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _write_wheel(directory: Path, files: List[Tuple[str, bytes, int]]) -> str:
    tag = f"{WHEEL_TAG_PYTHON}-{_platform_tag()}"
    name = f"{_dist()}-{tag}.whl"
    info = f"{_dist()}.dist-info"
    wheel = f"Wheel-Version: 1.0\nGenerator: snapbus_build\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files = [
        *files,
        (f"{info}/METADATA", _metadata().encode(), 0o644),
        (f"{info}/WHEEL", wheel.encode(), 0o644),
    ]
    record = []
    for path, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path, data, mode in files:
            entry = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    os.replace(tmp, directory / name)
    return name
