"""Isolated execution of untrusted Python (model-written code) for the code verifier.

What: `run_python(code, stdin, limits) -> SandboxResult` runs one program in a fresh
sandbox and returns a verdict (`status` in ok, error, timeout, memory_limit, output_limit,
sandbox_error) plus exit code, capped stdout/stderr and wall time. `SandboxPool` runs many
jobs in parallel (one worker per core by default). `SandboxProcess(code, limits)` is the same
sandbox kept alive and talked to by lines (`send`, `readline(timeout_s)`, `close() ->
SandboxResult`; `SandboxClosed` when it has ended), for verifiers that keep a program serving
requests (e.g. a candidate's solution and a judge, with only plain data crossing the host).
`cascade sandbox FILE.py` is the CLI. The package re-exports nothing: import each name from
the module below that defines it (`from sandboxes.core import run_python`).

Modules:
  limits.py       the data of the API: `SandboxLimits` and the `SandboxResult` verdict
  command.py      the warm sandbox's command line (bwrap -> the zygote) and each run's pinned rlimits
  zygote.py       the warm sandbox, host side: one pre-started zygote per interpreter, forking each run
  zygote_main.py  the warm sandbox's inside (stdlib only): the zygote, and per run its init and program
  launch.py       one sandbox from start to verdict, shared by `run_python` and `SandboxProcess`
  core.py         `run_python`: one program run to its end
  session.py      `SandboxProcess`: a program kept alive and talked to by lines
  pool.py         `SandboxPool`: many independent programs in parallel, one per core
  slots.py        per-run unprivileged uids and the sweep that kills whatever a run left behind
  memory.py       one memory limit for a run's whole process tree (a cgroup, else a watchdog)
  cgroups.py      the memory cgroup per run, used where a probe shows the kernel enforces it
  seccomp.py      the seccomp filter, built with libseccomp through ctypes
  cli.py          `cascade sandbox FILE.py [--stdin P] [--timeout S]`: one file, one JSON verdict

Why this design (layers, each catching what the one before misses; every one of them made
per run, see "The warm sandbox" below):

1. Namespaces: new pid, net, ipc, uts, mount and cgroup namespaces per run. The network
   namespace only has a loopback, so nothing reaches the host (outbound connections from
   this machine may *appear* to succeed, so a firewall is not enough). The filesystem is
   an empty root with read-only binds of /usr and of the Python install only (not /root,
   not the repository, not the host /tmp), read-only everywhere except the run's own
   size-capped tmpfs working directory (/tmp), the program mounted read-only, a cleared
   environment. The run's init is pid 1 of its pid namespace: when it dies (the program
   exited, or the host killed it) every process inside dies, daemons and double forks included.
   The outer bwrap lists the namespaces instead of `--unshare-all` on purpose: as root,
   `--unshare-all` also creates a user namespace in which only uid 0 is mapped, which makes
   dropping to an unprivileged uid impossible, and an unprivileged uid is the point of layer 2.
2. An unprivileged uid per concurrent slot (uids 60000+slot, all capabilities and the
   bounding set dropped, no_new_privs). RLIMIT_NPROC is not enforced for root,
   so without this a fork bomb is unbounded; a per-slot uid also makes "kill everything
   this program started" exact: after every run we sweep the slot's uid. Slots are
   claimed with `flock` on files in a lock directory, so several processes (pytest, the
   trainer, the CLI) never share a uid at the same time and a sweep never hits a
   neighbour's program.
3. rlimits (address space, CPU seconds, file size, open files, processes, stack, and every
   other one pinned), each with soft = hard so a program can lower a limit but never raise
   one (CPU keeps soft < hard for its SIGXCPU label; see command.py), and a wall-clock
   deadline enforced by the parent, which kills the run's init (taking the namespace down)
   and then sweeps the uid.
4. One memory limit for the whole run (`memory_mb`: every process and thread of it
   together; RLIMIT_AS alone caps each process, so 8 forked children could take 8x it): a
   memory cgroup per run (v2 memory.max, else v1 memory.limit_in_bytes, used only if a probe
   shows the kernel enforces it) that the run's first process enters before it does anything
   else (a warmer keeps that move cheap), removed after the run; else a watchdog thread summing the RSS (PSS to confirm)
   of the slot uid's processes every 10 ms. Either kills the run as `memory_limit`.
   RLIMIT_AS stays as a second layer at the same total. See memory.py and cgroups.py.
5. seccomp (libseccomp through ctypes, compiled to BPF, installed by the program's process
   last of its set-up): sockets other than AF_UNIX, ptrace, process_vm_*, mount, unshare/setns,
   namespace-creating clone flags, keyring, bpf, perf, io_uring, kexec, modules, reboot
   all fail with EPERM. Skipped (recorded in `detail`) if libseccomp is missing.
6. Output is read with caps: a flood is killed and reported as `output_limit`.

The warm sandbox (zygote.py, zygote_main.py): starting an interpreter costs ~33 ms here,
most of a short run, so one bwrap holds a started interpreter (the zygote, root, no network,
read-only mounts) and each run is a fork of it that then makes every layer above for itself:
its memory cgroup, new namespaces, its own tmpfs /tmp, /proc, /dev/pts and read-only
/sandbox/main.py, the slot uid, rlimits, seccomp; the program then runs as `__main__` as
`python -I main.py` would (tests/sandboxes/test_zygote.py compares the two). Nothing passes
from one run to the next: the zygote never reads a run's program or stdin (fds only), and a
run only changes its own copy-on-write copy of the zygote's memory
(tests/redteam/test_redteam_sandbox_warm.py attacks exactly this). The runs of one zygote share
its hash seed (set iteration order is the same in every run; `random` is reseeded per fork).

Verdicts never come from text the program controls: `ok` means exit code 0 of a run we
did not have to kill. The stderr is only used to *label* a failure (MemoryError ->
memory_limit); no text can turn a failure into `ok`. Sandbox failures (bwrap missing,
the zygote or a run's set-up failing) are `sandbox_error` and are decided by the run's init
through its own status socket, which the program cannot write to (it is closed before the
program runs), plus a once-per-process self test, so a program cannot pretend to be an
infrastructure failure.

Requires root (to switch to the slot uids) and the Debian package `bubblewrap`
(scripts/setup.sh installs it); otherwise every run is a `sandbox_error` with a message
that says what is missing.
"""
