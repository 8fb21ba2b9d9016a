"""Both directions of every verifier's error, on the shared case lists (tests/rewards/suites.py):

    .venv/bin/python benchmarks/bench_reward_suites.py [--workers 2]

per reward: the red-team pay rate (attacks paid more than they may earn, or scored as an
infrastructure error the trainer would skip: should be 0%) and the
honest pass rate (honest answers scored as they should be: should be 100%), with the ids of the
cases that miss. The code reward's cases need the sandbox (root + bubblewrap); without it they
are left out and the line says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the `tests` case lists

from tests.rewards.suites import HONEST, RED_TEAM, build_rewards, close_rewards, score_cases  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    from sandboxes.core import sandbox_available

    rewards = build_rewards(args.workers)
    if not sandbox_available():
        rewards.pop("code")
        print("code: left out (no sandbox)")
    try:
        start = time.perf_counter()
        red, honest = score_cases(rewards, RED_TEAM), score_cases(rewards, HONEST)
        seconds = time.perf_counter() - start
    finally:
        close_rewards(rewards)
    print(f"{'reward':<18} {'red-team paid':>15} {'honest passed':>15}  misses")
    for name in rewards:
        attacks = [c for c in RED_TEAM if c.reward == name]
        goods = [c for c in HONEST if c.reward == name]
        paid = [("infra:" if r.infra_error else "paid:") + c.id for c in attacks
                if (r := red[f"{name}/{c.id}"]).score is None or r.score > c.want or r.infra_error]
        missed = [c.id for c in goods if (r := honest[f"{name}/{c.id}"]).score is None or abs(r.score - c.want) > 1e-6
                  or r.infra_error]
        red_rate = f"{len(paid)}/{len(attacks)} ({100 * len(paid) / max(1, len(attacks)):.0f}%)"
        ok_rate = f"{len(goods) - len(missed)}/{len(goods)} ({100 * (len(goods) - len(missed)) / max(1, len(goods)):.0f}%)"
        misses = ", ".join(paid + [f"refused:{i}" for i in missed])
        print(f"{name:<18} {red_rate:>15} {ok_rate:>15}  {misses}")
    print(f"{len(RED_TEAM) + len(HONEST)} cases in {seconds:.1f}s")


if __name__ == "__main__":
    main()
