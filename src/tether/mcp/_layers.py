"""The mounts a confined launch lays before bwrap starts, in a mount namespace of its own.

On a tmpfs at ``LAYERS`` (out of the server's sight): a private write layer per overlaid folder
(``m{i}`` over ``l{i}``), and a neutral view per launcher folder (``s{j}`` over ``r{j}``) so that
``/proc/self/mountinfo`` inside never names a host path. With an allowlist (``net``) the launch
also makes a network namespace, binds the proxy's listening socket there and sends it to the host
(``tether.mcp._netproxy``). One small program (``LAUNCHER``, run ``-I -S`` by the host's
interpreter) makes the system calls and execs bwrap: one process start.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LAUNCHER", "LAYERS", "SCRATCH_BYTES", "layered", "overlay_status", "run_in_layers"]

LAYERS = "/mnt"  # in the launch's own mount namespace: where the layers are laid
# The most each memory-backed folder of a confined server holds: the layers' tmpfs (its private
# write layers) here, its /tmp, home and a launcher's tmpfs in ``tether.mcp._sandbox``. Past it,
# a write fails with ENOSPC inside instead of filling the host's memory (a tmpfs's default is half).
SCRATCH_BYTES = 512 << 20

LAUNCHER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_char_p)
REC, PRIVATE, BIND = 0x4000, 0x40000, 0x1000
def fail(what):
    sys.stderr.write("tether-layers: %s: %s\n" % (what, os.strerror(ctypes.get_errno())))
    sys.exit(125)
def mount(source, target, kind=None, flags=0, data=None):
    enc = lambda s: None if s is None else s.encode()
    return libc.mount(enc(source), enc(target), enc(kind), flags, enc(data)) == 0
at, net, rest = sys.argv[1], sys.argv[2], sys.argv[4:]
SCRATCH = int(sys.argv[3])
lowers, rest = rest[1 : 1 + int(rest[0])], rest[1 + int(rest[0]) :]
staged, command = rest[1 : 1 + int(rest[0])], rest[1 + int(rest[0]) :]
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x20000 | (0x40000000 if net != "-" else 0)) != 0:
    fail("cannot enter a user, mount and network namespace of its own")
for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid), ("gid_map", "0 %d 1" % gid)):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
if net != "-":
    import fcntl, socket, struct
    port, fd = net.split(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:  # SIOCSIFFLAGS lo IFF_UP: the kernel gives it 127.0.0.1 and ::1
            fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", 1))
        except OSError:
            fail("cannot bring the loopback of its network namespace up")
    listener = socket.create_server(("127.0.0.1", int(port)), backlog=128)
    with listener, socket.socket(fileno=int(fd)) as channel:  # neither is kept: closed here
        socket.send_fds(channel, [b"L"], [listener.fileno()])
if not mount("none", "/", None, REC | PRIVATE):
    fail("cannot make the mounts private")
if (lowers or staged) and not mount("tether-layers", at, "tmpfs", 0, "size=%d" % SCRATCH):
    fail("cannot mount a tmpfs on " + at)
if lowers or staged:
    os.mkdir(at + "/e")
for i, lower in enumerate(lowers):
    lo, up, work, merged = ("%s/%s%d" % (at, x, i) for x in "luwm")
    for d in (lo, up, work, merged):
        os.mkdir(d)
    if not mount(lower, lo, None, BIND | REC):
        fail("cannot bind " + lower)
    if not mount("overlay", merged, "overlay", 0, "lowerdir=%s,upperdir=%s,workdir=%s" % (lo, up, work)):
        fail("cannot lay a write layer over " + lower)
for j, folder in enumerate(staged):
    raw, view = "%s/r%d" % (at, j), "%s/s%d" % (at, j)
    os.mkdir(raw)
    os.mkdir(view)
    if not mount(folder, raw, None, BIND | REC):
        fail("cannot bind " + folder)
    if not mount("overlay", view, "overlay", 0, "lowerdir=%s:%s/e" % (raw, at)):
        if not mount(raw, view, None, BIND | REC):
            fail("cannot show " + folder)
os.execv(command[0], command)
"""


def layered(
    argv: Sequence[str], lowers: Sequence[Path], staged: Sequence[Path] = (), net: str | None = None
) -> list[str]:
    """``argv`` (bwrap's) run after the layers over ``lowers`` and views of ``staged``; with ``net``
    (``PORT:FD``) in a network namespace of its own whose proxy socket is sent over ``FD``."""
    folders = [str(len(lowers)), *map(str, lowers), str(len(staged)), *map(str, staged)]
    scratch = str(SCRATCH_BYTES)
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, LAYERS, net or "-", scratch, *folders, *argv]


_STATUS: list[str | None] = []  # overlay_status's answer, once known (this process)


def overlay_status() -> str | None:
    """``None`` when private write layers work here (Linux 5.11+), else why not (the folders are
    then shown read-only). Probed once per process."""
    if not _STATUS:
        _STATUS.append(_probe(["/bin/sh", "-c", f'test -d "{LAYERS}/m0"']))
    return _STATUS[0]


def run_in_layers(command: Sequence[str]) -> bool:
    """Whether ``command`` (bwrap's probe) succeeds inside layers over ``/usr/share``: success
    answers ``overlay_status`` too, in one process start."""
    if _STATUS or _probe(command) is not None:
        return False
    _STATUS.append(None)
    return True


def _probe(command: Sequence[str]) -> str | None:
    if not Path(LAYERS).is_dir():
        return f"{LAYERS} is missing"
    try:
        done = subprocess.run(
            layered(command, [Path("/usr/share")]), capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{type(err).__name__}: {err}"
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")
