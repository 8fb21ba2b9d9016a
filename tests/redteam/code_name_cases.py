"""Attacks on the names the code judge's tests resolve (case list; tests/redteam/test_redteam_code_names.py
runs them, benchmarks/bench_reward_suites.py counts them).

Each case is a WRONG solution that also declares a name the tests use (a builtin, a module, a
HumanEval harness name, a helper, an exception), so it would pass if that name were taken from
the candidate. Every one must score 0. `paid_before` records which ones the judge paid before
names came from the row (rewards.code_names): the others were already caught (the test's own
definition won, or the value could not cross the wire) and stay here as regressions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class NameAttack:
    """One red-team case for the code reward."""

    id: str
    program: str
    tests: str
    prompt: str | None = None
    paid_before: bool = False


def asserts(entry: str | None, *snippets: str) -> str:
    return json.dumps({"kind": "assert", "entry_point": entry, "asserts": list(snippets), "time_limit_s": 3.0})


def humaneval(entry: str, body: str) -> str:
    """HumanEval's layout: METADATA, `def check(candidate)`, then `check(<entry>)` in one snippet."""
    return asserts(entry, f"METADATA = {{'author': 'x'}}\n\n\ndef check(candidate):\n{body}\n\ncheck({entry})")


STDIO = json.dumps({"kind": "stdio", "time_limit_s": 3.0,
                    "cases": [{"input": "5\n", "output": "120\n"}, {"input": "7\n", "output": "5040\n"}]})

PI_PROMPT = 'from math import pi\n\n\ndef area(r: float) -> float:\n    """Area of a circle of radius r."""\n'
CLOSE_PROMPT = ('Complete the following function.\n\nimport math\nfrom math import isclose\n\n\n'
                'def area(r: float) -> float:\n    """Area of a circle of radius r."""\n')
PALINDROME_PROMPT = '''def is_palindrome(string: str) -> bool:
    """ Test if given string is a palindrome """
    return string == string[::-1]


def make_palindrome(string: str) -> str:
    """ Find the shortest palindrome that begins with a supplied string. """
'''

ATTACKS: list[NameAttack] = [
    # builtins the tests call
    NameAttack("builtin_len", "def evens(n):\n    return []\ndef len(x):\n    return 5",
               asserts("evens", "assert len(evens(10)) == 5"), paid_before=True),
    NameAttack("builtin_abs", "def root2():\n    return 0.0\ndef abs(x):\n    return 0.0",
               asserts("root2", "assert abs(root2() - 1.41421) < 1e-4"), paid_before=True),
    NameAttack("builtin_sorted", "def uniq(xs):\n    return []\ndef sorted(xs):\n    return [1, 2, 3]",
               asserts("uniq", "assert sorted(uniq([3, 1, 3, 2])) == [1, 2, 3]"), paid_before=True),
    NameAttack("builtin_round", "def mean(xs):\n    return 0.0\ndef round(x, n=0):\n    return 1.5",
               asserts("mean", "assert round(mean([1, 2]), 2) == 1.5"), paid_before=True),
    NameAttack("builtin_range", "def square(n):\n    return 0\ndef range(*args):\n    return []",
               asserts("square", "for i in range(1, 6):\n    assert square(i) == i * i"), paid_before=True),
    NameAttack("builtin_all", "def is_even(n):\n    return False\ndef all(xs):\n    return True",
               asserts("is_even", "assert all([is_even(n) for n in (2, 4, 6)])"), paid_before=True),
    NameAttack("builtin_any", "def is_even(n):\n    return True\ndef any(xs):\n    return False",
               asserts("is_even", "assert not any([is_even(n) for n in (1, 3, 5)])"), paid_before=True),
    NameAttack("builtin_str", "def fact(n):\n    return 0\ndef str(x):\n    return '120'",
               asserts("fact", "assert str(fact(5)) == '120'"), paid_before=True),
    NameAttack("builtin_set", "def uniq(xs):\n    return []\ndef set(xs):\n    return {1, 2}",
               asserts("uniq", "assert set(uniq([2, 1, 2])) == {1, 2}"), paid_before=True),
    NameAttack("builtin_max", "def scores():\n    return [1]\ndef max(xs):\n    return 10",
               asserts("scores", "assert max(scores()) == 10"), paid_before=True),
    NameAttack("builtin_isinstance", "def to_int(s):\n    return s\ndef isinstance(x, t):\n    return True",
               asserts("to_int", "assert isinstance(to_int('3'), int)")),
    NameAttack("builtin_print_and_int", "def parse(s):\n    return 'x'\ndef print(*a):\n    return None\n"
               "def int(x):\n    return 7", asserts("parse", "print(parse('7'))\nassert int(parse('7')) == 7"), paid_before=True),
    # exceptions and the assert machinery
    NameAttack("exception_names", "def fact(n):\n    return 0\ndef ValueError(*a):\n    return None\n"
               "def AssertionError(*a):\n    return None",
               asserts("fact", "try:\n    fact(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')")),
    NameAttack("dunder_builtins", "__builtins__ = {}\ndef __import__(*a):\n    return None\ndef fact(n):\n    return 0",
               asserts("fact", "assert fact(5) == 120")),
    # builtins inside HumanEval's check(candidate), and the harness names themselves
    NameAttack("humaneval_abs_in_check", "def root2():\n    return 0.0\ndef abs(x):\n    return 0.0",
               humaneval("root2", "    assert abs(candidate() - 1.41421) < 1e-4"), paid_before=True),
    NameAttack("humaneval_len_in_check", "def evens(n):\n    return [0]\ndef len(x):\n    return 5",
               humaneval("evens", "    assert len(candidate(10)) == 5"), paid_before=True),
    NameAttack("humaneval_check", "def fact(n):\n    return 0\ndef check(candidate):\n    return None",
               humaneval("fact", "    assert candidate(5) == 120")),
    NameAttack("humaneval_candidate_and_metadata", "METADATA = {}\ndef fact(n):\n    return 0\n"
               "def candidate(n):\n    return 120", humaneval("fact", "    assert candidate(5) == 120")),
    # modules and names the prompt imports
    NameAttack("module_math_as_function", "def area(r):\n    return 0.0\ndef math(*a):\n    return 0",
               asserts("area", "assert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)"), prompt=CLOSE_PROMPT),
    NameAttack("module_alias_and_isclose", "import cmath as math\ndef area(r):\n    return 0.0\n"
               "def isclose(*a, **k):\n    return True",
               asserts("area", "assert isclose(area(1.0), 3.14159, rel_tol=1e-3)"), prompt=CLOSE_PROMPT, paid_before=True),
    NameAttack("prompt_constant", "pi = 0.0\ndef area(r):\n    return 0.0",
               asserts("area", "assert abs(area(1.0) - pi) < 1e-9"), prompt=PI_PROMPT, paid_before=True),
    NameAttack("module_re", "def digits(n):\n    return 'abc'\ndef re(*a):\n    return 1",
               asserts("digits", "assert re.fullmatch(r'[0-9]+', digits(5))")),
    # helpers: one the prompt defines (with a body), one nobody declares
    NameAttack("prompt_helper_redefined", "def is_palindrome(s):\n    return True\ndef make_palindrome(s):\n    return s",
               humaneval("make_palindrome", "    assert is_palindrome(candidate('cat'))\n"
                                            "    assert candidate('cat').startswith('cat')"),
               prompt=PALINDROME_PROMPT, paid_before=True),
    NameAttack("undeclared_helper", "def fact(n):\n    return 0\ndef same(a, b):\n    return True",
               asserts("fact", "assert same(fact(5), 120)"), paid_before=True),
    # no entry point: the tests' unbound names are the candidate's, never a builtin
    NameAttack("no_entry_point_builtin", "def add(a, b):\n    return 0\ndef abs(x):\n    return 4",
               asserts(None, "assert abs(add(1, -5)) == 4"), paid_before=True),
    # the name of the exception a call raised is the candidate's too: one that ends iteration
    NameAttack("raises_stop_iteration_in_map", "def is_prime(n):\n    raise StopIteration",
               asserts("is_prime", "assert all(map(is_prime, [2, 3, 5, 7]))"), paid_before=True),
    NameAttack("raises_stop_iteration_in_for", "def square(n):\n    raise StopIteration",
               asserts("square", "for got, want in zip(map(square, [1, 2, 3]), [1, 4, 9]):\n    assert got == want"),
               paid_before=True),
    # stdio: the program runs alone; rebinding names only changes its own output
    NameAttack("stdio_rebinds_print", "import builtins\nbuiltins.print = lambda *a, **k: None\n"
               "def input(*a):\n    return '0'\nprint(int(input()))", STDIO),
    NameAttack("stdio_rebinds_int", "def int(x):\n    return 0\nprint(int(input()))", STDIO),
]

CONTROLS: list[NameAttack] = [
    # honest solutions that use builtin-like names of their own, or rely on the row's names
    NameAttack("own_sorted_helper", "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out\n"
               "def uniq(xs):\n    return sorted(set(xs))", asserts("uniq", "assert sorted(uniq([3, 1, 3, 2])) == [1, 2, 3]")),
    NameAttack("prompt_constant_used", "from math import pi\ndef area(r):\n    return pi * r * r",
               asserts("area", "assert abs(area(1.0) - pi) < 1e-9"), prompt=PI_PROMPT),
    NameAttack("prompt_imports_used", "def area(r):\n    return 3.14159265 * r * r",
               asserts("area", "assert math.isclose(area(1.0), 3.14159, rel_tol=1e-3)",
                       "assert isclose(area(2.0), 12.566, rel_tol=1e-3)"), prompt=CLOSE_PROMPT),
    NameAttack("prompt_helper_not_repeated", "def make_palindrome(string):\n    for i in range(len(string) + 1):\n"
               "        if string[i:] == string[i:][::-1]:\n            return string + string[:i][::-1]",
               humaneval("make_palindrome", "    assert is_palindrome(candidate('cat'))\n"
                                            "    assert candidate('cat') == 'catac'"), prompt=PALINDROME_PROMPT),
    NameAttack("no_entry_point_two_functions", "def add(a, b):\n    return a + b\ndef neg(a):\n    return -a",
               asserts(None, "assert abs(add(1, neg(5))) == 4")),
    NameAttack("chat_prompt", "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)",
               humaneval("fact", "    assert candidate(5) == 120"),
               prompt=[{"role": "user", "content": "Write it:\n```python\ndef fact(n: int) -> int:\n    \"\"\"n!\"\"\"\n```"}]),
]
