"""Red team: the warm sandbox (every run a fork of one zygote) carries nothing from one run to the next.

Each attack is a pair: run N tries to leave something behind (a file, shared memory, an env var,
a live process, a patched module, a lowered limit, its program's secrets in memory), run N+1
looks for it. Every pair checks that both runs were forks of the *same* zygote, so the pair
really crossed the mechanism under attack, and most carry a positive control (run N+1 finds
what it left itself), so a check that cannot see anything fails instead of passing.
"""

from __future__ import annotations

import json
import textwrap

import pytest

import sandboxes.zygote
from sandboxes.command import zygote_key
from sandboxes.core import run_python, sandbox_available
from sandboxes.limits import SandboxLimits, SandboxResult
from sandboxes.session import SandboxProcess
from sandboxes.slots import pids_of_uid

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")

LIMITS = SandboxLimits(timeout_s=10.0, memory_mb=512)
TOKEN = "cascade" + "-warm-" + "7d41b0"  # never written whole in any program below


def zygote_pid() -> int:
    return sandboxes.zygote._zygotes[zygote_key(LIMITS)].proc.pid


def pair(first: str, second: str, stdin: tuple[str | None, str | None] = (None, None),
         limits: tuple[SandboxLimits, SandboxLimits] = (LIMITS, LIMITS)) -> tuple[SandboxResult, SandboxResult]:
    """Run N then run N+1, both forked from one zygote, nothing of run N left on the host."""
    run_python("pass", limits=LIMITS)  # the zygote is up
    before = zygote_pid()
    one = run_python(first, stdin[0], limits[0])
    assert one.uid is not None and pids_of_uid(one.uid) == [], "run N left a process behind"
    two = run_python(second, stdin[1], limits[1])
    assert zygote_pid() == before, "the zygote was replaced between the runs: the pair proves nothing"
    assert one.status != "sandbox_error" and two.status != "sandbox_error", (one, two)
    return one, two


WRITE_EVERYWHERE = textwrap.dedent("""\
    import os
    written = []
    for root, dirs, files in os.walk('/'):
        if root.startswith('/proc'):
            dirs[:] = []
            continue
        try:
            with open(os.path.join(root, 'left-by-run-n'), 'w') as fh:
                fh.write('x')
            written.append(root)
        except OSError:
            pass
    print(sorted(written))""")

FIND_MARKERS = textwrap.dedent("""\
    import os
    open('/tmp/left-by-run-n', 'w').close()  # control: its own marker must be found
    found = []
    for root, dirs, files in os.walk('/'):
        if root.startswith('/proc'):
            dirs[:] = []
            continue
        found += [os.path.join(root, f) for f in files if f == 'left-by-run-n']
    print(found)""")


def test_files_written_anywhere_are_gone_in_the_next_run() -> None:
    one, two = pair(WRITE_EVERYWHERE, FIND_MARKERS)
    assert one.status == "ok" and one.stdout.strip() == "['/tmp']", one  # the run's own tmpfs only
    assert two.status == "ok" and two.stdout.strip() == "['/tmp/left-by-run-n']", two


SHMGET = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.shmget(0x5EC2E7, 4096, {flags}) >= 0)\n"
IPC_CREAT = "0o1000 | 0o666"


def test_shared_memory_does_not_survive_the_run() -> None:
    """SysV shared memory (a fresh IPC namespace per run) and /dev/shm (read-only) keep nothing."""
    create = SHMGET.format(flags=IPC_CREAT)
    create += "try:\n    open('/dev/shm/left', 'w')\n    print('shm-writable')\nexcept OSError:\n    print('shm-closed')\n"
    look = SHMGET.format(flags="0") + "import os\nprint(os.listdir('/dev/shm'))\n"
    look += SHMGET.format(flags=IPC_CREAT).split("\n", 2)[2]  # control: it can create its own
    one, two = pair(create, look)
    assert one.status == "ok" and one.stdout.split() == ["True", "shm-closed"], one
    assert two.status == "ok" and two.stdout.split() == ["False", "[]", "True"], two


def test_environment_changes_do_not_carry_over() -> None:
    show = "import os, json\nprint(json.dumps(dict(os.environ), sort_keys=True))"
    one, two = pair("import os\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')\nos.environ['PATH'] = '/tmp'\n" + show, show)
    assert json.loads(one.stdout)["LEAK"] == "1"
    assert json.loads(two.stdout) == {"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin", "PWD": "/tmp"}


def test_background_processes_die_with_their_run() -> None:
    daemon = textwrap.dedent("""\
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.01)
            os._exit(0)
        print('spawned')""")
    one, two = pair(daemon, "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert one.stdout.strip() == "spawned"
    assert two.stdout.strip() == "[1, 2]", two  # its init and itself: nothing of run N


def test_patched_modules_and_interpreter_state_do_not_carry_over() -> None:
    patch = textwrap.dedent("""\
        import builtins, json, os, random, signal, sys
        json.dumps = lambda *a, **k: 'patched'
        builtins.print = lambda *a, **k: None
        builtins.leak = 1
        sys.path.insert(0, '/tmp')
        sys.setrecursionlimit(50)
        sys.modules['evil'] = json
        random.seed(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.umask(0)
        sys.stdout.write('patched')""")
    check = textwrap.dedent("""\
        import builtins, json, os, signal, sys
        state = [json.dumps([1]), hasattr(builtins, 'leak'), '/tmp' in sys.path, sys.getrecursionlimit(),
                 'evil' in sys.modules, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, os.umask(0o22)]
        print(state)""")
    one, two = pair(patch, check)
    assert one.stdout == "patched"
    assert two.stdout.strip() == "[\'[1]\', False, False, 1000, False, True, 18]", two


def test_random_state_is_not_shared_between_runs() -> None:
    show = "import os, random\nprint(random.random(), os.urandom(8).hex())"
    one, two = pair(show, show)
    assert one.stdout.split()[0] != two.stdout.split()[0] and one.stdout.split()[1] != two.stdout.split()[1]


SCAN_MEMORY = textwrap.dedent("""\
    import re, sys
    own = sys.stdin.read().strip()  # control: this run's own secret must be found
    pattern = re.compile(rb'c[a]scade-w[a]rm-7d41b0|' + re.escape(own[:4].encode()) + rb'[:]' + re.escape(own[5:].encode()))
    found = set()
    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split('-'))
            if 'r' not in line.split()[1]:
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            found.update(m.group().decode() for m in pattern.finditer(data))
    print(sorted(found))""")


def test_no_trace_of_the_previous_program_or_its_stdin_in_memory() -> None:
    """The zygote never reads a run's program or stdin, so a later run, forked from it, cannot
    find them anywhere in its own memory (the code reward's judge keeps its tests in its program)."""
    secret_program = f"SECRET = {TOKEN!r}\nimport sys\nprint(len(sys.stdin.read() + SECRET))"
    one, two = pair(secret_program, SCAN_MEMORY, stdin=(TOKEN, "mine:4f2a9c"))
    assert one.status == "ok" and one.stdout.strip() == str(2 * len(TOKEN)), one
    assert two.status == "ok" and two.stdout.strip() == "['mine:4f2a9c']", two


def test_only_stdio_is_open() -> None:
    show = "import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
    one, two = pair("import os\nfds = [os.open('/tmp', os.O_RDONLY) for _ in range(20)]\n" + show, show)
    assert len(one.stdout.split(",")) > 20
    assert two.stdout.strip() == "[0, 1, 2, 3]", two  # 3: the listing's own


def test_limits_are_each_runs_own() -> None:
    """A run lowering its limits does not lower the next one's; a larger limit for one run does
    not stay for the next; every run gets exactly its request."""
    show = "import resource as r\nprint([r.getrlimit(x) for x in (r.RLIMIT_NOFILE, r.RLIMIT_AS, r.RLIMIT_NPROC)])"
    lower = "import resource as r\nr.setrlimit(r.RLIMIT_NOFILE, (8, 8))\nr.setrlimit(r.RLIMIT_AS, (300 << 20, 300 << 20))\n" + show
    one, two = pair(lower, show)
    assert one.stdout.strip() == "[(8, 8), (314572800, 314572800), (32, 32)]", one
    assert two.stdout.strip() == "[(64, 64), (536870912, 536870912), (32, 32)]", two
    big = SandboxLimits(timeout_s=10.0, memory_mb=1024)
    small = SandboxLimits(timeout_s=10.0, memory_mb=256)
    allocate = "b = bytearray(600 << 20)\nprint('allocated')"
    one, two = pair(allocate, allocate, limits=(big, small))
    assert one.status == "ok" and two.status == "memory_limit", (one, two)
    one, two = pair(allocate, allocate, limits=(small, big))
    assert one.status == "memory_limit" and two.status == "ok", (one, two)
    spin = "while True:\n    pass"
    cpu_bound = SandboxLimits(timeout_s=60.0, cpu_s=1)  # the CPU limit ends it, not the wall clock (a busy machine)
    one, two = pair(spin, "print('quick')", limits=(cpu_bound, LIMITS))
    assert one.status == "timeout" and one.detail == "CPU time limit" and two.status == "ok", (one, two)


def test_concurrent_runs_cannot_reach_each_other() -> None:
    """Two live runs of one zygote: separate network namespaces (an abstract unix socket of one is
    not there for the other), pid namespaces and uids."""
    listener = textwrap.dedent("""\
        import socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind('\\0cascade-warm-listener')
        s.listen(1)
        print('listening', flush=True)
        sys.stdin.readline()""")
    probe = textwrap.dedent("""\
        import os, socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect('\\0cascade-warm-listener')
            print('connected')
        except OSError as err:
            print('refused', err.errno)
        print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))""")
    run_python("pass", limits=LIMITS)
    before = zygote_pid()
    with SandboxProcess(listener, LIMITS) as live:
        assert live.readline(5.0) == b"listening"
        own = run_python(probe, limits=LIMITS)
        control = SandboxProcess(listener.replace("listening", "second") + "\n", LIMITS)  # same name, own namespace
        assert control.readline(5.0) == b"second"
        control.close()
        assert live.alive
    assert zygote_pid() == before
    assert own.status == "ok" and own.stdout.split("\n")[0].startswith("refused"), own
    assert own.stdout.split("\n")[1] == "[1, 2]" and own.uid != live.uid, own


def test_a_run_cannot_touch_the_zygote() -> None:
    attack = textwrap.dedent("""\
        import os, signal
        for pid in set(range(1, 400)) - {os.getpid()}:
            for sig in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        print('done')""")
    one, two = pair(attack, "print('next')")
    assert one.status == "ok" and one.stdout.strip() == "done", one
    assert two.status == "ok" and two.stdout.strip() == "next"
