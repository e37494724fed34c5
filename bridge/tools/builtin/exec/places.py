"""What of the host the sandbox shows, and what of Bridge's it must never show."""

from __future__ import annotations

import os
import stat
from functools import cache
from pathlib import Path

from bridge.config import Settings

# Where the workspace appears in the sandbox; also the cwd and HOME there.
SANDBOX_WORKSPACE = "/workspace"

# The programs and their libraries, read-only. /bin, /sbin and /lib* are links into /usr on a merged
# /usr (Debian since 12) and are made the same links; on an older layout they are bound as folders.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The few host files under /etc that programs need and that hold nothing of anyone's: the loader's
# cache, Debian's alternatives (/usr/bin/awk is a link through /etc/alternatives) and the time zone.
# passwd, group, hosts and nsswitch.conf are made up (etc_files); the rest of /etc is not there.
ETC_SHARED = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
# Only with allow_network: name resolution and the public CA certificates. Not /etc/ssl as a whole:
# /etc/ssl/private holds keys, and a sandbox started by root reads root's 0600 files.
ETC_NETWORK = ("/etc/resolv.conf", "/etc/gai.conf", "/etc/ssl/certs", "/etc/ssl/openssl.cnf")

SANDBOX_UID = 1000
SANDBOX_USER = "sandbox"
# How deep a /proc folder is searched for a writable file (/proc/irq/<n>/smp_affinity is 2 down).
_PROC_DEPTH = 3


def etc_files() -> dict[str, str]:
    """The made-up /etc files: a user for the sandbox's uid, and localhost."""
    return {
        "/etc/passwd": (
            f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{SANDBOX_WORKSPACE}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "/etc/group": f"{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
        "/etc/hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }


def shared_sources(network: bool) -> list[Path]:
    """The host paths the sandbox shows (read-only), for the check that Bridge's own are not among them."""
    found = [Path(p) for p in (*SYSTEM_DIRS, *ETC_SHARED) if Path(p).exists() and not Path(p).is_symlink()]
    if network:
        found += [Path(p) for p in ETC_NETWORK if Path(p).exists()]
    return found


def private_places(settings: Settings) -> list[Path]:
    """Bridge's own places, resolved: the database's folder (the database, its WAL, admin.token and, by
    default, media), the media folder, and the folder Bridge runs in (config.toml by default, and a
    checkout's code and data)."""
    places = [settings.storage.path.resolve().parent, Path.cwd().resolve()]
    if settings.media.path is not None:
        places.append(settings.media.path.resolve())
    return places


def workspace_problem(settings: Settings, workspace: Path) -> str | None:
    """Why `workspace` must not be the sandbox's workspace: it is, or holds, one of Bridge's own places
    (the sandbox could then read the database or the config). None when it is apart from them."""
    root = workspace.resolve()
    for place in private_places(settings):
        if place == root or place.is_relative_to(root):
            return (
                f"the workspace {root} holds Bridge's own files ({place}); commands there could read the "
                "database or the config. Set [tools] workspace to a folder of its own, e.g. data/workspace."
            )
    return None


def hidden_places(settings: Settings, network: bool) -> list[Path]:
    """Bridge's places that lie inside a folder the sandbox shows (say an install under /usr/local):
    they are covered with an empty, read-only mount."""
    shared = shared_sources(network)
    return [
        place
        for place in private_places(settings)
        if any(place != source and place.is_relative_to(source) for source in shared)
    ]


@cache
def proc_covers() -> tuple[str, ...]:
    """The parts of /proc mounted read-only over the sandbox's own: /proc/sys, /proc/sysrq-trigger and
    every other entry that holds a file with a write bit.

    The sandbox's processes have no capabilities, but where Bridge runs as root they are still uid 0
    on the host, and the kernel lets the owner of a sysctl write it on permission bits alone: measured
    here, a sandbox started by root rewrote /proc/sys/kernel/printk_ratelimit (core_pattern would have
    been as easy, and that runs a program as root on the next crash). bwrap covers only /proc/irq and
    /proc/bus (it tests /proc/sys itself, a folder that is never writable).
    """
    covers = [path for path in ("/proc/sys", "/proc/sysrq-trigger") if os.path.lexists(path)]
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return tuple(covers)
    for entry in entries:
        if entry.name.isdigit() or entry.path in covers:
            continue
        if _holds_writable(entry.path, _PROC_DEPTH):
            covers.append(entry.path)
    return tuple(sorted(covers))


def _holds_writable(path: str, depth: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISREG(info.st_mode):
        return bool(info.st_mode & 0o222)
    if not stat.S_ISDIR(info.st_mode) or depth == 0:
        return False
    try:
        children = [entry.path for entry in os.scandir(path)]
    except OSError:
        return False
    return any(_holds_writable(child, depth - 1) for child in children)


def strip_setid(workspace: Path) -> int:
    """Clear the set-user-id and set-group-id bits of every file in the workspace; how many had one.

    Run after each call: a sandbox started by root makes root-owned files, and chmod u+s is allowed to
    a file's owner, capabilities or not, so a command could leave a set-uid-root program on the host
    for anyone who can reach the workspace. Links are not followed.
    """
    stripped = 0
    for folder, dirs, files in os.walk(workspace):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
                if not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    stripped += 1
            except OSError:
                continue
    return stripped
