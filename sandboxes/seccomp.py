"""Seccomp filter for sandboxed programs, built with libseccomp through ctypes.

Why libseccomp and not a hand-written BPF program: it knows each architecture's syscall
numbers and adds the architecture check (a foreign-ABI syscall, e.g. `int 0x80` on x86_64,
kills the process instead of slipping past a filter written for the native numbers).
Why ctypes: libseccomp2 is part of every Debian install (apt depends on it), so the layer
needs no compiled Python package. The filter is exported once per process as BPF bytes, handed
to the warm sandbox's zygote at its start and installed by each run's program process itself
(sandboxes/zygote_main.py), last of its set-up.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import socket
import tempfile

SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_NE = 1
_SCMP_CMP_MASKED_EQ = 7

# Syscalls a test program never needs and that widen the kernel attack surface or help
# to escape: debugging other processes, (re)mounting, namespaces, kernel keyrings, eBPF,
# perf, io_uring (a second syscall path seccomp cannot see into), modules, kexec, reboot.
DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fsconfig",
    "move_mount", "open_tree", "mount_setattr",
    "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog",
    "settimeofday", "clock_settime", "adjtimex", "sethostname", "setdomainname",
)

# clone() with any of these flags creates a namespace (a user namespace would hand the
# program capabilities inside it).
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.lru_cache(maxsize=1)
def filter_bpf() -> bytes | None:
    """The compiled BPF program (bytes), or None when libseccomp is not available.

    >>> bpf = filter_bpf()
    >>> bpf is None or (len(bpf) % 8 == 0 and len(bpf) > 0)
    True
    """
    name = ctypes.util.find_library("seccomp")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]

    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:
        def add(syscall: str, action: int, *cmps: _ArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(syscall.encode())
            if nr < 0:  # not a syscall on this architecture (e.g. new ones on old kernels)
                return
            arr = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
            if rc < 0:
                raise OSError(-rc, f"seccomp_rule_add({syscall}) failed")

        eperm = _errno_action(errno.EPERM)
        for syscall in DENIED_SYSCALLS:
            add(syscall, eperm)
        # Only AF_UNIX sockets (some libraries use socketpair internally).
        add("socket", _errno_action(errno.EAFNOSUPPORT), _ArgCmp(0, _SCMP_CMP_NE, socket.AF_UNIX, 0))
        for flag in _CLONE_NS_FLAGS:
            add("clone", eperm, _ArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        # clone3 passes flags in memory a filter cannot read: ENOSYS makes libc fall back to clone.
        add("clone3", _errno_action(errno.ENOSYS))
        with tempfile.TemporaryFile() as fh:
            rc = lib.seccomp_export_bpf(ctx, fh.fileno())
            if rc < 0:
                raise OSError(-rc, "seccomp_export_bpf failed")
            fh.seek(0)
            return fh.read()
    finally:
        lib.seccomp_release(ctx)
