"""`cascade verify-home [--json]`: check every lineage record under `$CASCADE_HOME` in full.

Readers check a record cheaply each time they use an output (spec.lineage_verify: layout, file
list, sizes, digests of small files). This command does the whole job, once, for every output
folder in the home (`data/`, `checkpoints/`, `evals/`): every data file re-hashed whatever its
size. It prints each problem by name with both values and exits 1 when there is any, 0 when
every record verifies. (A dataset's version, the content hash of the table it wrote, is not
recomputed from `data.parquet`: a parquet round trip renames list fields, which that hash sees;
the file digests recorded beside it are the check.) Records written before records
listed their files are reported as `unsigned` (their files cannot be checked), not as problems.
Folders set aside by a reader (`.unverified-*`) and temporary ones (`.tmp-*`, `*.partial`) are
not outputs and are skipped. No Dagster instance is opened: this reads the folders only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HELP = "re-hash every output under $CASCADE_HOME and check it against its lineage.json (exit 1 on any mismatch)"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("verify-home", help=HELP, description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=cmd_verify_home)


def record_folders(home: Path) -> list[Path]:
    """Every folder under the home's output roots that holds a lineage record, sorted; folders
    under a hidden name (set aside, temporary) and `<version>.partial` ones left out."""
    from spec.lineage import LINEAGE_FILE
    from spec.lineage_verify import OUTPUT_ROOTS

    found = []
    for root in OUTPUT_ROOTS:
        base = home / root
        for record in base.rglob(LINEAGE_FILE) if base.is_dir() else []:
            rel = record.parent.relative_to(base)
            if not any(part.startswith(".") or part.endswith(".partial") for part in rel.parts):
                found.append(record.parent)
    return sorted(found)


def verify_home(home: Path) -> list[dict[str, Any]]:
    """One entry per record folder: {folder, asset, data_version, unsigned, problems}."""
    from spec.lineage import FILES_KEY
    from spec.lineage_verify import load_record, verify_record

    results = []
    for folder in record_folders(home):
        record, _ = load_record(folder)
        problems = verify_record(folder, full=True)
        results.append({"folder": str(folder), "asset": (record or {}).get("asset"),
                        "data_version": (record or {}).get("data_version"),
                        "unsigned": record is not None and FILES_KEY not in record, "problems": problems})
    return results


def cmd_verify_home(args: argparse.Namespace) -> int:
    from spec.paths import cascade_home

    home = cascade_home()
    results = verify_home(home)
    bad = [r for r in results if r["problems"]]
    if args.json:
        print(json.dumps({"home": str(home), "records": results, "failed": len(bad)}, indent=2))
        return 1 if bad else 0
    for r in results:
        for problem in r["problems"]:
            print(f"MISMATCH {problem}")
    unsigned = [r for r in results if r["unsigned"]]
    for r in unsigned:
        print(f"unsigned {r['folder']}: its record predates file digests (layout checked only)")
    print(f"cascade verify-home: {len(results)} records under {home}, {len(results) - len(bad)} verified, "
          f"{len(bad)} with problems, {len(unsigned)} unsigned")
    return 1 if bad else 0
