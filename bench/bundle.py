"""An offline bundle for running the scale benchmark on a bigger machine without network access.

That machine (x86-64, Python 3.12, run as root) has no PostgreSQL, no Bridge dependencies and no way to
fetch them, so this builds, on a machine with pip's local indexes and Debian's PostgreSQL 15, an ignored
folder of the checkout that travels with it (the recipe: /work/shared/scale-bundle.md):

- `whl/`: cp312 manylinux x86-64 wheels of Bridge's dependencies (pyproject.toml's `[project]
  dependencies` and the `postgresql` extra), one version each, and of this checkout's Bridge;
- `pg.tar.xz`: PostgreSQL 15's programs, modules and share files in Debian's layout, with every
  non-glibc shared library they load in `lib/`;
- `baseline/`: the `bridge` (and `adapters`) packages at the commit the baseline figures were measured at;
- `run.sh`: installs the two, then runs `python -m bench.scale` with the arguments it is given.

Build it here, then on the big machine, from the checkout's root:

    python -m bench.bundle [--out DIR] [--baseline COMMIT]
    bash .bench-bundle/run.sh --check      # imports, a PostgreSQL server, plpgsql and Bridge's migrations
    bash .bench-bundle/run.sh ARGS...      # python3 -m bench.scale ARGS...

run.sh puts the checkout before the wheels on PYTHONPATH, so the Bridge measured is the checkout's as it
travels; the Bridge wheel is there for its metadata (the adapters' entry points).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / ".bench-bundle"
# Where bench/results' baseline figures of the scale benchmark were measured.
DEFAULT_BASELINE = "65a0060"
# The tree needs a few MB beside it under the 64 MiB the device takes with a checkout.
SIZE_LIMIT = 55 * 1024 * 1024

PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "any"]
# Only the token benchmark needs it, and it is 41 MB; listed in case it moves into a shipped extra.
LEFT_OUT = {"bpe-openai"}
# bench.scale's workers talk HTTP to the fake platforms through it, whatever the core list says.
EXTRA_REQUIREMENTS = ["aiohttp"]

PG_VERSION = "15"
PG_LIB = Path(f"/usr/lib/postgresql/{PG_VERSION}")
PG_SHARE = Path(f"/usr/share/postgresql/{PG_VERSION}")
PG_PROGRAMS = ["postgres", "initdb", "pg_ctl", "pg_isready", "psql"]
# The target has its own glibc, and a second one would not load beside its dynamic linker.
GLIBC = re.compile(
    r"^(ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|"
    r"libBrokenLocale|libc_malloc_debug|libthread_db|libnss_.*)\.so(\.\d+)*$"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bundle", description="Build the offline scale benchmark bundle."
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the bundle's folder (.bench-bundle/)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="the baseline's commit (65a0060)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    wheels(out / "whl")
    postgres(out / "pg.tar.xz")
    baseline(args.baseline, out / "baseline")
    run_sh = out / "run.sh"
    run_sh.write_text(RUN_SH)
    run_sh.chmod(0o755)

    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    for part in ("whl", "pg.tar.xz", "baseline", "run.sh"):
        path = out / part
        size = (
            sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            if path.is_dir()
            else path.stat().st_size
        )
        print(f"  {part:<10} {size / 1e6:6.1f} MB")
    print(f"bundle {out}: {total / 1e6:.1f} MB")
    if total > SIZE_LIMIT:
        print(
            f"too big: over {SIZE_LIMIT / 1e6:.0f} MB, it would not travel with the checkout", file=sys.stderr
        )
        return 1
    return 0


def requirements(pyproject: Path) -> list[str]:
    """The requirement strings the benchmark needs, from pyproject.toml, so the bundle follows it."""
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["postgresql"], *EXTRA_REQUIREMENTS]
    kept: dict[str, str] = {}
    for requirement in wanted:
        name = _normalized(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        # The first spelling wins: the core list's bounds rather than the bare extra name.
        if name not in LEFT_OUT:
            kept.setdefault(name, requirement)
    return list(kept.values())


def wheels(folder: Path) -> None:
    # Fresh each time: an older version left from a previous build would be a second copy, and two
    # versions of one distribution break `pip install --no-deps --target`.
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    # One resolve with the dependencies' dependencies, so every version is one pip found compatible;
    # -qq, as the local indexes warn about every name one of them lacks.
    target = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", *platforms]
    download = [sys.executable, "-m", "pip", "download", "-qq", "--only-binary=:all:", *target]
    _run([*download, "-d", str(folder), *requirements(ROOT / "pyproject.toml")])
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(ROOT)])
    versions: dict[str, list[str]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        versions.setdefault(_normalized(wheel.name.split("-")[0]), []).append(wheel.name)
    doubles = {name: names for name, names in versions.items() if len(names) > 1}
    if doubles:
        raise SystemExit(f"more than one version of a distribution in {folder}: {doubles}")
    others = [f.name for f in folder.iterdir() if f.suffix != ".whl"]
    if others:
        raise SystemExit(f"not wheels (pip built or fetched an sdist?): {others}")
    print(f"whl: {len(versions)} distributions")


def postgres(archive: Path) -> None:
    """Debian's PostgreSQL, relocatable: it finds share/ and its modules relative to its programs, so
    the layout under a root is kept, and the libraries go into ROOT/lib for LD_LIBRARY_PATH."""
    if not (PG_LIB / "bin" / "postgres").exists():
        _run(["apt-get", "install", "-y", "-q", "postgresql"])
    with tempfile.TemporaryDirectory(prefix="bench-bundle-pg-") as tmp:
        root = Path(tmp)
        bin_dir = root / PG_LIB.relative_to("/") / "bin"
        bin_dir.mkdir(parents=True)
        for program in PG_PROGRAMS:
            shutil.copy2(PG_LIB / "bin" / program, bin_dir / program)
        # bitcode/ and llvmjit are the JIT (which needs LLVM's 100 MB library, and PostgreSQL runs
        # without it when it cannot be loaded); pgxs/ is for building extensions.
        shutil.copytree(
            PG_LIB / "lib",
            root / PG_LIB.relative_to("/") / "lib",
            ignore=shutil.ignore_patterns("bitcode", "pgxs", "llvmjit*"),
        )
        if not (root / PG_LIB.relative_to("/") / "lib" / "plpgsql.so").exists():
            raise SystemExit("no plpgsql.so: Bridge's migrations create plpgsql triggers")
        shutil.copytree(
            PG_SHARE,
            root / PG_SHARE.relative_to("/"),
            ignore=shutil.ignore_patterns("man"),
            ignore_dangling_symlinks=True,
        )
        libraries = _shared_libraries(
            [*bin_dir.iterdir(), *(root / PG_LIB.relative_to("/") / "lib").glob("*.so")]
        )
        (root / "lib").mkdir()
        for soname, path in sorted(libraries.items()):
            # Under the name the programs ask for; copy2 follows the soname's symlink to the file.
            shutil.copy2(path, root / "lib" / soname)
        print(f"pg: {len(PG_PROGRAMS)} programs, {len(libraries)} libraries; compressing")
        archive.unlink(missing_ok=True)
        with tarfile.open(archive, "w:xz", preset=9) as tar:
            for entry in sorted(root.iterdir()):
                tar.add(entry, arcname=entry.name)


def _shared_libraries(objects: list[Path]) -> dict[str, Path]:
    """soname -> file of every library outside glibc that ldd lists for objects (it lists the whole
    closure, so no recursion is needed)."""
    found: dict[str, Path] = {}
    for obj in objects:
        listing = subprocess.run(["ldd", str(obj)], capture_output=True, text=True, check=True).stdout
        for line in listing.splitlines():
            match = re.match(r"\s*(\S+) => (.*?) \(0x", line)
            if "not found" in line:
                raise SystemExit(f"{obj} needs a library this machine lacks: {line.strip()}")
            if match and not GLIBC.match(match.group(1)):
                found[match.group(1)] = Path(match.group(2))
    return found


def baseline(commit: str, folder: Path) -> None:
    """The code the baseline figures were measured with. adapters/ too: the baseline's bridge loads its
    adapters by entry point, and the installed ones of today's checkout need today's bridge."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "bridge", "adapters"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=tar.stdout, check=True)
    print(f"baseline: {commit} in {folder}")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(command: list[str]) -> None:
    print("$", " ".join(command[:6]), "...", flush=True)
    subprocess.run(command, check=True)


# Run on the big machine from the checkout's root; everything it needs is in its own folder.
RUN_SH = r"""#!/usr/bin/env bash
# Written by bench/bundle.py. From the checkout's root:
#   bash .bench-bundle/run.sh --check    imports, a PostgreSQL server, plpgsql and Bridge's migrations
#   bash .bench-bundle/run.sh ARGS...    python3 -m bench.scale ARGS...
# BUNDLE_SITE and BUNDLE_PG move the installs away from /tmp/site and /tmp/pg.
set -euo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SITE="${BUNDLE_SITE:-/tmp/site}"
PG="${BUNDLE_PG:-/tmp/pg}"
started=$(date +%s%N)

# The wheels are cp312: another Python would fail later, on some C extension's import.
python3 -c 'import sys; assert sys.version_info[:2] == (3, 12), f"run.sh needs python3 3.12: {sys.version}"'
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --root-user-action=ignore --target "$SITE" "$BUNDLE"/whl/*.whl
rm -rf "$PG"
mkdir -p "$PG"
tar -xJf "$BUNDLE/pg.tar.xz" -C "$PG"
# As root, devkit/postgres.py runs initdb and the server as postgres or nobody, who must read all of it.
chmod -R a+rX "$PG"
# Built on Debian 12: the programs need glibc 2.34, the bundled libstdc++ and libgcc_s 2.36 and 2.35.
# Below 2.36 the system's own two serve (ICU needs a GCC 12 libstdc++, GLIBCXX_3.4.30).
glibc=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
older() { [ "$(printf '%s\n' "$1" "$2" | sort -V | head -1)" != "$2" ]; }
if older "$glibc" 2.34; then
    echo "run.sh: glibc $glibc here; the bundled PostgreSQL needs 2.34 or newer" >&2
    exit 1
elif older "$glibc" 2.36; then
    rm -f "$PG/lib/libstdc++.so.6" "$PG/lib/libgcc_s.so.1"
    echo "run.sh: glibc $glibc: using this system's libstdc++ and libgcc_s"
fi

# Debian's PostgreSQL reads zones only from /usr/share/zoneinfo (--with-system-tzdata, no variable
# moves it). Without it initdb falls back to the POSIX zone UTC0, which works but which psycopg does
# not know (a warning per connection); Python's tzdata wheel has the same compiled files.
if [ ! -e /usr/share/zoneinfo/UTC ]; then
    if [ "$(id -u)" = 0 ]; then
        mkdir -p /usr/share/zoneinfo
        cp -r "$SITE/tzdata/zoneinfo/." /usr/share/zoneinfo/
        chmod -R a+rX /usr/share/zoneinfo
        echo "run.sh: no /usr/share/zoneinfo here: filled it from the tzdata wheel"
    else
        echo "run.sh: no /usr/share/zoneinfo and not root: PostgreSQL will run in UTC0" >&2
    fi
fi

# The checkout first: the code measured is the one that travelled, not the wheel built with the bundle.
export PYTHONPATH="$PWD:$SITE"
export PATH="$PG/usr/lib/postgresql/15/bin:$SITE/bin:$PATH"
export LD_LIBRARY_PATH="$PG/lib"
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost PYTHONUNBUFFERED=1
# LD_LIBRARY_PATH reaches Python too: fail here, not in the middle of a run, if a library of
# Debian 12 does not suit this Python's own modules.
python3 -c 'import ssl, hashlib, ctypes, lzma, zlib, sqlite3' || {
    echo "run.sh: python3 cannot load its modules with LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2
    exit 1
}
echo "run.sh: setup $(( ($(date +%s%N) - started) / 1000000 )) ms: wheels in $SITE, PostgreSQL in $PG"

if [ "${1:-}" = "--check" ]; then
    exec python3 - <<'PYTHON'
import asyncio
import os
import shutil
import sys

import aiohttp, bridge, psycopg, psycopg_pool, telegram  # noqa: F401, E401
from bridge.store.postgres import PostgresStore
from devkit.postgres import postgres_server, unavailable

print("ok: imports, python", sys.version.split()[0], "bridge from", bridge.__file__)
print("initdb:", shutil.which("initdb"), "unavailable:", unavailable())


async def migrate(url: str) -> None:
    store = PostgresStore(url)
    await store.open()
    await store.close()


with postgres_server() as server:
    url = server.database()
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.execute("CREATE TABLE t (n int)")
        conn.execute(
            "CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.n := NEW.n + 1; "
            "RETURN NEW; END $$"
        )
        conn.execute("CREATE TRIGGER t_bump BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION bump()")
        conn.execute("INSERT INTO t VALUES (1)")
        assert conn.execute("SELECT n FROM t").fetchone() == (2,)
        version, zone, pid = conn.execute(
            "SELECT version(), current_setting('TimeZone'), pg_backend_pid()"
        ).fetchone()
        uid = os.stat(f"/proc/{pid}").st_uid
        print("ok: SELECT 1 and a plpgsql trigger on", version, "in", zone, "run by uid", uid)
    asyncio.run(migrate(server.database()))
    print("ok: Bridge's PostgreSQL migrations")
print("ok: server stopped")
PYTHON
fi
exec python3 -m bench.scale "$@"
"""


if __name__ == "__main__":
    sys.exit(main())
