"""The warm sandbox's inside: the zygote and the three processes it forks per run (stdlib only).

Runs as `python -I -c <this file's source> CONTROL_FD BPF_HEX` under the outer bwrap that
sandboxes/command.py builds (read-only /usr and Python install, no network, cleared
environment, root with capabilities); sandboxes/zygote.py starts it and sends it requests.

Why: a fresh interpreter costs ~33 ms here (most of a short run), bwrap ~3 ms. The zygote starts
the interpreter once; each run is a fork of it, so it skips start-up but must get, per run,
everything a fresh `bwrap ... setpriv ... prlimit ... python -I main.py` gave it:

  A  (fork of the zygote) enters the run's memory cgroup (an fd of its cgroup.procs, from the
     host), unshares mount, pid, net, ipc, uts and cgroup namespaces, forks B, exits.
  B  pid 1 of the run's own pid namespace, root, the run's init (as bwrap's was): sends the host
     a pidfd of itself (the host's kill switch: SIGKILL to a namespace's init kills every process
     in it), mounts the run's own tmpfs /tmp, tmpfs /sandbox with the program (read-only),
     /proc and /dev/pts, forks C, reaps, reports C's exit status, exits (taking the namespace down).
  C  the program, pid 2: its stdio, no other fd, setsid, /tmp as cwd, every rlimit, the slot uid,
     no capability (bounding set included), no_new_privs, the seccomp filter; then it runs
     /sandbox/main.py as __main__ in this interpreter and exits through the interpreter's own
     finalization (SystemExit, atexit, thread joins, flush errors: as `python main.py` does).

Nothing of one run can reach the next: the zygote never reads a run's program or stdin (they
come as fds, read only in B and C), and a run only ever changes its own copy-on-write copy of
the zygote's memory; every writable mount is made per run. The zygote is single-threaded.
Status messages to the host (one SEQPACKET message each): b"pid" with the pidfd, b"started",
b"exit N", b"error TEXT" (the run's setup failed: a sandbox_error).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import socket
import sys

PROGRAM = "/sandbox/main.py"
WORKDIR = "/tmp"
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000  # ns cgroup uts ipc pid net
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 4, 24, 22, 38, 47
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.fflush.argtypes = [ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def serve() -> bytes:
    """The zygote's loop: one fork per request. Returns only in a run's program process (C),
    with the program's source; the zygote exits when the host closes the control socket."""
    control = socket.socket(fileno=int(sys.argv[1]))
    bpf = bytes.fromhex(sys.argv[2])
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, 8)
        if not message:
            os._exit(0)  # the host is gone
        gc.freeze()  # runs leave the zygote's objects alone: their collections skip them, pages stay shared
        pid = os.fork()
        if pid == 0:
            control.close()
            return _run_side(json.loads(message), fds, bpf)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)  # A exits as soon as it has forked B


def _run_side(request: dict, fds: list[int], bpf: bytes) -> bytes:
    """A, then B and C (see the module docstring). Only C returns."""
    program_fd, stdin_fd, out_fd, err_fd, status_fd = fds[:5]
    status = socket.socket(fileno=status_fd)
    try:
        if request["cgroup"]:
            os.write(fds[5], b"0")  # A and all it will start: inside the run's cgroup from here on
            os.close(fds[5])
        _check(_libc.unshare(_NAMESPACES), "unshare")
        if os.fork() != 0:
            os._exit(0)  # A: B is reparented to the outer init, which reaps it
        pidfd = os.pidfd_open(os.getpid())
        socket.send_fds(status, [b"pid"], [pidfd])
        os.close(pidfd)
        _mount_run(request["tmpfs_bytes"], program_fd)
        source = os.pread(program_fd, 1 << 30, 0)
        os.close(program_fd)
        child = os.fork()
    except BaseException as err:  # noqa: BLE001 - any failure is this run's sandbox_error
        _report(status, f"error {type(err).__name__}: {err}")
        os._exit(127)
    if child == 0:
        try:
            _become_program(request, (stdin_fd, out_fd, err_fd), status, bpf)
        except BaseException as err:  # noqa: BLE001
            _report(status, f"error {type(err).__name__}: {err}")
            os._exit(127)
        return source
    _init(child, status, (stdin_fd, out_fd, err_fd))


def _report(status: socket.socket, text: str) -> None:
    try:
        status.send(text.encode(errors="replace")[:4000])
    except OSError:
        pass


def _mount_run(tmpfs_bytes: int, program_fd: int) -> None:
    """B's mounts: private propagation, then every writable place fresh for this run."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", WORKDIR, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={tmpfs_bytes}")
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for name in ("sys", "sysrq-trigger", "irq", "bus"):  # what bwrap's --proc covers read-only
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _mount("devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    size = os.fstat(program_fd).st_size
    folder = os.path.dirname(PROGRAM)
    _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,size={size + (64 << 10)}")
    out = os.open(PROGRAM, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        offset = 0
        while offset < size:
            offset += os.sendfile(out, program_fd, offset, size - offset)
    finally:
        os.close(out)
    _mount(None, folder, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _init(child: int, status: socket.socket, stdio: tuple[int, int, int]) -> None:
    """B after the fork: hold no pipe of the program's, reap, report C's status, exit."""
    for fd in stdio:
        os.close(fd)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(wait_status)
    _report(status, f"exit {128 - code if code < 0 else code}")
    os._exit(0)


def _become_program(request: dict, stdio: tuple[int, int, int], status: socket.socket, bpf: bytes) -> None:
    """C: from the zygote's root child to the run's program process (the order matters: the
    capabilities are needed until the uid switch, seccomp comes last)."""
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    keep = status.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    os.chdir(WORKDIR)
    for number, soft, hard in request["rlimits"]:
        resource.setrlimit(number, (soft, hard))
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
        last_cap = int(fh.read())
    for cap in range(last_cap + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "drop bounding set")
    uid = request["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # permitted, effective and ambient capabilities go with uid 0
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data), "capset")  # inheritable too
    _check(_libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0), "clear ambient capabilities")
    # The uid change made it non-dumpable (its /proc/self files root's); an exec'd program is
    # dumpable, and nothing in this memory is secret (the zygote holds no run's data).
    _check(_libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if bpf:
        buffer = ctypes.create_string_buffer(bpf, len(bpf))
        prog = _SockFprog(len(bpf) // 8, ctypes.addressof(buffer))
        _check(_libc.prctl(_PR_SET_SECCOMP, 2, ctypes.addressof(prog), 0, 0), "seccomp")
    status.send(b"started")
    status.close()


def _fresh_stdio() -> None:
    """New sys.stdin/stdout/stderr on fds 0-2, made as the interpreter's start-up makes them (the
    zygote's were made for its own fds: seekability and position are cached at creation)."""
    import io

    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        buffered = io.open(fd, mode + "b", -1, closefd=False)
        buffered.raw.name = f"<{name}>"
        stream = io.TextIOWrapper(buffered, old.encoding, old.errors, "\n", old.line_buffering, old.write_through)
        stream.mode = mode
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def run_program(source: bytes) -> None:
    """Run the program as `python -I /sandbox/main.py` would, in this (forked) interpreter, and
    exit. An uncaught exception is printed without this function's frame and exits 1 (130 for
    KeyboardInterrupt, the 128 + 2 its signal exit gives); SystemExit as the interpreter does."""
    import builtins
    import types
    from importlib.machinery import SourceFileLoader

    _fresh_stdio()
    vars(sys).update(argv=[PROGRAM], orig_argv=[sys.executable, "-I", PROGRAM])
    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins, __file__=PROGRAM, __cached__=None)  # the order
    main.__dict__["__loader__"] = SourceFileLoader("__main__", PROGRAM)  # of a fresh interpreter's __main__
    sys.modules["__main__"] = main
    before = set(sys.modules)
    try:
        exec(compile(source, PROGRAM, "exec", dont_inherit=True), main.__dict__)  # noqa: S102 - it is sandboxed
        code = 0
    except SystemExit as exit_:
        code = _system_exit_code(exit_)
    except BaseException as err:  # noqa: BLE001 - printed as the interpreter prints it
        tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
        vars(sys).update(last_type=type(err), last_value=err, last_traceback=tb)  # as the interpreter sets them
        sys.excepthook(type(err), err.with_traceback(tb), tb)
        code = 130 if isinstance(err, KeyboardInterrupt) else 1
    _finalize(code, [sys.modules[name] for name in sys.modules if name not in before] + [main])


def _system_exit_code(exit_: SystemExit) -> int:
    """The exit status the interpreter gives an uncaught SystemExit (printing a non-int code)."""
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001 - as the interpreter: the status stays 1
        pass
    return 1


def _finalize(code: int, user_modules: list) -> None:
    """What the interpreter's shutdown does that a program can observe, then _exit: join the
    non-daemon threads, run atexit, flush stdout/stderr (a failed flush exits 120), clear the
    program's own modules' globals (so their objects' __del__ and unflushed files run, in reverse
    import order, __main__ last) and collect its garbage. Not the teardown of the zygote's own
    modules: it has no effect a program can see, and it would touch, so copy, every page the run
    shares with the zygote (25 ms of a 30 ms run here). Objects a program hangs on a module it
    did not import itself are not finalized (the one difference from a fresh interpreter)."""
    import atexit
    import gc

    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    failed = not _flush_stdio()
    for module in reversed(user_modules):
        namespace = getattr(module, "__dict__", {})
        for names in ([n for n in namespace if n.startswith("_") and n != "__builtins__"], list(namespace)):
            for name in names:
                if name != "__builtins__":
                    namespace[name] = None
    gc.collect()
    failed = not _flush_stdio(report=False) or failed  # what teardown printed; reported once above
    _libc.fflush(None)  # what C code wrote through stdio, as exit() would
    os._exit(120 if failed else code)


def _flush_stdio(report: bool = True) -> bool:
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - reported as the interpreter reports it
            ok = False
            if name == "stdout" and report:  # as the interpreter's default hook reports it (no traceback)
                import traceback

                text = "".join(traceback.format_exception_only(*sys.exc_info()[:2]))
                try:
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n{text}")
                except Exception:  # noqa: BLE001
                    pass
    return ok


if __name__ == "__main__":
    run_program(serve())
