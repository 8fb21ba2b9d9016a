"""Row accounting: rows in, rows dropped by reason, and the identity that ties them to rows out.

Every step that drops rows (quarantine, decontamination, dedup, blends, the versioned write)
counts with one `RowAccount` and checks `rows_in == rows_out + Σ dropped` before its output
is trusted: a row is never lost without a reason. Every reason is listed, one line each, in
curation/reasons.py (docs/reasons.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping


class RowAccountingError(ValueError):
    """rows_in != rows_out + Σ dropped, or a negative count."""


@dataclass
class RowAccount:
    """Rows that entered a step and the rows it dropped, per reason."""

    rows_in: int = 0
    """Rows that entered (valid + dropped)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Reason -> rows dropped for it."""

    def drop(self, reason: str, n: int = 1) -> None:
        """Count `n` rows dropped for `reason` (zero is not recorded)."""
        if n < 0:
            raise RowAccountingError(f"negative drop count {n} for {reason!r}")
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + int(n)

    def drop_all(self, counts: Mapping[str, int] | Iterable[str], prefix: str = "") -> None:
        """Add {reason: n} counts, or one drop per reason in an iterable of reasons."""
        items = counts.items() if isinstance(counts, Mapping) else ((r, 1) for r in counts)
        for reason, n in items:
            self.drop(prefix + str(reason), n)

    def check(self, rows_out: int, where: str = "rows") -> dict[str, int]:
        """The drop counts, after checking rows_in == rows_out + Σ dropped (RowAccountingError if not)."""
        total = sum(self.dropped.values())
        if self.rows_in != rows_out + total:
            raise RowAccountingError(f"{where}: row accounting broken: rows_in={self.rows_in} != rows_out={rows_out} "
                                     f"+ dropped={total} {self.dropped}")
        return dict(self.dropped)
