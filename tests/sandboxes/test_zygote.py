"""The warm sandbox behaves as a fresh `python -I main.py` would, and looks after its zygote.

A run is a fork of a started interpreter (sandboxes/zygote_main.py), so what a fresh interpreter
gives a program for free (its __main__, sys.argv, std streams, exit status, shutdown) is made
by hand: each case runs the same program in the sandbox and in a bare interpreter with the
same stdin, and compares what a verifier sees (exit status, stdout, stderr). The isolation
attacks on the mechanism are in tests/redteam/test_redteam_sandbox_warm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import sandboxes.zygote
from sandboxes.command import PROGRAM, _python_paths, zygote_key
from sandboxes.core import run_python, sandbox_available
from sandboxes.limits import SandboxLimits

needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="sandbox needs root + bubblewrap (scripts/setup.sh)")
LIMITS = SandboxLimits(timeout_s=10.0)

INTROSPECT = textwrap.dedent("""\
    import json, sys
    def stream(s):
        return [type(s).__name__, s.encoding, s.errors, s.line_buffering, s.write_through, s.name, s.mode,
                s.buffer.raw.name, type(s.buffer).__name__, s.buffer.raw.closefd, s is getattr(sys, '__' + s.name[1:-1] + '__')]
    print(json.dumps({
        'globals': [(k, type(v).__name__) for k, v in globals().items() if k not in ('json', 'sys', 'stream')],
        'name': __name__, 'file': __file__, 'loader': [type(__loader__).__name__, __loader__.name, __loader__.path],
        'argv': sys.argv, 'orig_argv': sys.orig_argv[1:], 'flags': list(sys.flags), 'path': sys.path,
        'executable': sys.executable, 'stdio': [stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        'stdin': sys.stdin.read(), 'recursion': sys.getrecursionlimit(), 'main': sys.modules['__main__'].__dict__ is globals(),
    }))""")

PROGRAMS = {
    "introspection": INTROSPECT,
    "exit_message": "import sys\nprint('out')\nsys.exit('bad things')",
    "exit_257": "import sys\nsys.exit(257)",
    "exit_none": "raise SystemExit",
    "exit_bool": "import sys\nsys.exit(True)",
    "traceback": "def f():\n    return 1 / 0\nprint('before')\nf()",
    "chained": "try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('v') from e",
    "keyboard_interrupt": "raise KeyboardInterrupt",
    "syntax_error": "x = = 1",
    "coding_cookie": "# -*- coding: latin-1 -*-\nprint(len('\u00e9'))",  # 2: its UTF-8 bytes read as latin-1
    "unflushed_file_at_exit": "out = open(1, 'w', closefd=False)\nout.write('late')",
    "del_at_exit": "class A:\n    def __del__(self):\n        print('finalized')\na = A()",
    "atexit_and_thread": textwrap.dedent("""\
        import atexit, threading, time
        atexit.register(lambda: print('atexit'))
        def later():
            time.sleep(0.2)
            print('thread')
        threading.Thread(target=later).start()
        print('main done')"""),
    "stdout_closed": "print('x')\nimport os\nos.close(1)",
    "replaced_stdout": "import io, sys\nsys.stdout = io.TextIOWrapper(open(1, 'wb', closefd=False))\nprint('replaced')",
    "stdin_lines": "import sys\nprint([line for line in sys.stdin])\nprint(sys.stdin.read() == '')",
}


def bare(code: str, stdin: str, tmp_path: Path) -> tuple[int, str, str]:
    program = tmp_path / "main.py"
    program.write_bytes(code.encode())  # as the sandbox writes it
    (tmp_path / "stdin").write_text(stdin)
    exe, _ = _python_paths(LIMITS)
    with open(tmp_path / "stdin", "rb") as fh:
        proc = subprocess.run([exe, "-I", str(program)], stdin=fh, capture_output=True, cwd=tmp_path, timeout=60,
                              env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"})
    code_ = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
    unpath = lambda text: text.decode().replace(str(program), PROGRAM)  # noqa: E731
    return code_, unpath(proc.stdout), unpath(proc.stderr)


@needs_sandbox
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_run_is_what_a_fresh_interpreter_gives(name: str, tmp_path: Path) -> None:
    code = PROGRAMS[name]
    stdin = "first line\nsecond\n"
    result = run_python(code, stdin, LIMITS)
    expected = bare(code, stdin, tmp_path)
    assert (result.exit_code, result.stdout, result.stderr) == expected
    if name == "introspection":
        seen = json.loads(result.stdout)
        assert seen["file"] == PROGRAM and seen["argv"] == [PROGRAM] and seen["main"] is True


@needs_sandbox
def test_a_dead_zygote_is_replaced() -> None:
    assert run_python("print(1)", limits=LIMITS).ok
    zygote = sandboxes.zygote._zygotes[zygote_key(LIMITS)]
    zygote.proc.kill()
    zygote.proc.wait()
    zygote._keeper.join()  # it has seen the zygote go (a run sent before would die with it: sandbox_error)
    result = run_python("print(2)", limits=LIMITS)
    assert result.ok and result.stdout == "2\n", result
    assert sandboxes.zygote._zygotes[zygote_key(LIMITS)] is not zygote


@needs_sandbox
def test_a_forked_host_starts_its_own_zygote() -> None:
    assert run_python("pass", limits=LIMITS).ok
    parent_zygote = sandboxes.zygote._zygotes[zygote_key(LIMITS)].proc.pid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports through the pipe and always _exits
        try:
            result = run_python("print(3)", limits=LIMITS)
            own = sandboxes.zygote._zygotes[zygote_key(LIMITS)].proc.pid
            os.write(write_end, json.dumps([result.stdout, own]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        stdout, child_zygote = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert stdout == "3\n" and child_zygote != parent_zygote
    assert run_python("print(4)", limits=LIMITS).stdout == "4\n"
    assert sandboxes.zygote._zygotes[zygote_key(LIMITS)].proc.pid == parent_zygote
