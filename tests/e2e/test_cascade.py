"""The whole cascade as assets, end to end on the tiny recipe: materialize everything, audit
lineage, swap the math source and check that exactly its downstream goes stale and reruns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_project.cli import main
from spec.paths import REPO_ROOT

pytestmark = pytest.mark.slow
TINY = str(REPO_ROOT / "recipes" / "tiny.yaml")
SWAP_DOWNSTREAM = {
    "file_math_prompts", "raw_math_prompts", "clean_math_prompts", "math_prompts_filtered", "math_rl_prompts", "code_rl_prompts",
    "swe_rl_prompts", "math_rl", "code_rl", "swe_rl", "eval_math_rl", "eval_code_rl", "eval_swe_rl",
    "forgetting_matrix",
}


@pytest.fixture(scope="module")
def cascade(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("cascade")
    mp = pytest.MonkeyPatch()
    mp.setenv("CASCADE_HOME", str(home))
    mp.setenv("DAGSTER_HOME", str(home / "dagster"))
    assert main(["run", "--recipe", TINY]) == 0
    yield home
    mp.undo()


def test_same_outputs_as_before_the_architecture_refactor(cascade: Path) -> None:
    """Issue 31 moved wiring, not results: every dataset version, checkpoint weight and eval score of a
    fresh tiny home equals the snapshot taken at 708a78b, before the refactor (tests/e2e/fingerprint.py;
    on another CPU the weights may differ in the last bits, within the fingerprint's tolerance)."""
    from tests.e2e.fingerprint import differences, fingerprint

    before = json.loads((Path(__file__).parent / "snapshots" / "tiny_outputs.json").read_text())
    assert differences(before, fingerprint(cascade)) == []


def _status(capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["status", "--recipe", TINY, "--json"]) == 0
    return {row["asset"]: row for row in json.loads(capsys.readouterr().out)}


def _lineage(capsys, asset: str) -> dict:
    capsys.readouterr()
    assert main(["lineage", asset, "--recipe", TINY, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _names(tree: dict) -> set[str]:
    return {tree["asset"]} | {n for c in tree["inputs"] for n in _names(c)}


def test_everything_materialized_and_fresh(cascade: Path, capsys) -> None:
    status = _status(capsys)
    assert {"base_model", "sft_stage1", "sft_stage2", "reward_model", "rlhf", "if_rl", "math_rl",
            "code_rl", "swe_rl", "forgetting_matrix"} <= set(status)
    assert all(r["materialized"] for r in status.values()), [a for a, r in status.items() if not r["materialized"]]
    assert not [a for a, r in status.items() if r["stale"]]
    for stage in ("sft_stage1", "rlhf", "math_rl", "swe_rl"):
        ckpt = Path(_lineage(capsys, stage)["path"])
        assert (ckpt / "model.safetensors").exists() and (ckpt / "lineage.json").exists()


def test_lineage_reaches_raw_sources(cascade: Path, capsys) -> None:
    tree = _lineage(capsys, "math_rl")
    assert set(tree) == {"asset", "data_version", "path", "code_version", "inputs"}
    names = _names(tree)
    # parent chain back to the base model, the stage's own data back to its raw file, reward code.
    assert {"if_rl", "rlhf", "sft_stage2", "sft_stage1", "base_model", "math_rl_prompts",
            "raw_math_prompts", "file_math_prompts", "reward/math"} <= names
    capsys.readouterr()
    assert main(["lineage", "checkpoints/math_rl", "--recipe", TINY]) == 0
    assert "file_math_prompts" in capsys.readouterr().out


def test_swap_math_source_reruns_only_downstream(cascade: Path, capsys) -> None:
    from curation.samples import generate
    from dagster_project.commands import get_instance
    from spec.lineage import tree_diff

    before = _lineage(capsys, "math_rl")
    generate("math_rl", cascade / "samples" / "math_prompts.jsonl", seed=4242)  # a new curated dataset

    status = _status(capsys)
    stale = {a for a, r in status.items() if r["stale"]}
    assert stale == SWAP_DOWNSTREAM - {"file_math_prompts"}
    for untouched in ("rlhf", "if_rl", "eval_rlhf", "eval_if_rl", "sft_stage2", "reward_model"):
        assert not status[untouched]["stale"]

    instance = get_instance()
    counts = {k.path[-1]: len(instance.fetch_materializations(k, limit=100).records)
              for k in instance.get_asset_keys()}
    assert main(["run", "--stale", "--recipe", TINY]) == 0
    after_counts = {k.path[-1]: len(instance.fetch_materializations(k, limit=100).records)
                    for k in instance.get_asset_keys()}
    rerun = {a for a in after_counts if after_counts[a] != counts.get(a, 0)}
    assert rerun == SWAP_DOWNSTREAM - {"file_math_prompts"}
    assert not [a for a, r in _status(capsys).items() if r["stale"]]

    after = _lineage(capsys, "math_rl")
    assert before["path"] != after["path"] and Path(before["path"]).exists() and Path(after["path"]).exists()
    changed = {asset for asset, _, _ in tree_diff(before, after)}
    assert changed == {"math_rl", "math_rl_prompts", "math_prompts_filtered", "clean_math_prompts", "raw_math_prompts",
                       "file_math_prompts"}


def test_cascade_report_and_gates(cascade: Path, capsys, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    capsys.readouterr()
    assert main(["report", "--recipe", TINY, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["checkpoints"][:3] == ["base_model", "sft_stage1", "sft_stage2"]
    for domain in ("math", "ifeval", "code", "swe", "rm"):
        c = report["matrix"]["swe_rl"][domain]
        assert c is not None and c["lo"] <= c["score"] <= c["hi"], domain
        assert set(c["modes"]) == {"think", "no_think"}
    stages = {e["stage"]: e for e in report["stages"]}
    for rl, own in (("rlhf", "rm"), ("if_rl", "ifeval"), ("math_rl", "math"), ("code_rl", "code"), ("swe_rl", "swe")):
        gates = stages[rl]["gates"]
        assert {"learned", "no_forgetting", "training_signal"} <= set(gates)
        assert gates["learned"]["domain"] == own and "p_value" in gates["learned"]
        assert gates["no_forgetting"]["passed"]  # the run succeeded, so the blocking gate passed
    assert [r["domain"] for r in stages["swe_rl"]["gates"]["no_forgetting"]["domains"]] == ["rm", "ifeval", "math", "code"]
    assert "training_signal" in text and "learned rm" in text
    # The asset stores the same report, with per-domain plots.
    from assets.common import latest_metadata
    from dagster_project.commands import get_instance
    import dagster as dg

    meta = latest_metadata(get_instance(), dg.AssetKey(["evals", "forgetting_matrix"]))
    stored = json.loads((Path(meta["path"]) / "report.json").read_text())
    assert stored["matrix"] == report["matrix"]


def test_no_think_responses_of_trained_checkpoints_hold_no_think_block(cascade: Path, capsys) -> None:
    """/no_think: the generation prompt pre-fills the empty think block, so no response holds one."""
    from curation.chat import NO_THINK_PREFILL
    from curation.samples import records
    from generation.engine import build_engine
    from trainer.evaluate import complete_greedy, render_prompts

    prompts = [r["prompt"] for r in records("math_eval") if isinstance(r, dict)][:6]
    texts = render_prompts(prompts, "no_think")
    assert all(t.endswith(NO_THINK_PREFILL) for t in texts)
    for stage in ("sft_stage2", "math_rl", "swe_rl"):
        ckpt = Path(_lineage(capsys, stage)["path"])
        card = (ckpt / "README.md").read_text()  # every checkpoint has its model card, evaluated
        assert card.startswith("---\nlibrary_name: transformers") and "| math | no_think |" in card
        engine = build_engine("hf", str(ckpt), dtype="float32", batch_size=6)
        try:
            completions = complete_greedy(engine, texts, 12)
        finally:
            engine.close()
        assert len(completions) == 6 and not [c for c in completions if "<think>" in c or "</think>" in c], stage


def _paths(tree: dict) -> list[str]:
    return [tree["path"]] + [p for c in tree["inputs"] for p in _paths(c)]


def _metadata_texts(instance) -> dict[str, list[str]]:
    """Every value of every materialization's and observation's metadata in `instance`, as text
    (JSON values serialized whole, so nested paths are in it), by asset."""
    import dagster as dg

    out: dict[str, list[str]] = {}
    for event_type in (dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_OBSERVATION):
        for record in instance.get_event_records(dg.EventRecordsFilter(event_type)):
            event = record.event_log_entry.dagster_event
            data = event.event_specific_data
            entry = getattr(data, "materialization", None) or getattr(data, "asset_observation", None)
            texts = out.setdefault(entry.asset_key.to_user_string(), [])
            texts += [json.dumps(getattr(v, "value", v), default=str) for v in entry.metadata.values()]
    return out


def test_moved_home_still_resolves(cascade: Path, capsys, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stored paths are relative to $CASCADE_HOME: a copied home, with the original moved out of the
    way, is fresh in Dagster, its lineage and report resolve inside it, and neither a record nor any
    materialization's metadata (nested values too: a checkpoint's `inputs`) names the old home."""
    import shutil

    moved = tmp_path_factory.mktemp("moved") / "home"
    shutil.copytree(cascade, moved, symlinks=True)
    old = str(cascade.resolve())
    assert not [p for p in moved.rglob("lineage.json") if old in p.read_text()]
    away = cascade.with_name(cascade.name + "_away")
    cascade.rename(away)  # anything still reading the old home now fails
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CASCADE_HOME", str(moved))
            mp.setenv("DAGSTER_HOME", str(moved / "dagster"))
            from dagster_project.commands import get_instance

            texts = _metadata_texts(get_instance())
            assert {"checkpoints/math_rl", "curated/clean_math_sft", "evals/forgetting_matrix"} <= set(texts)
            assert any("${CASCADE_HOME}/data/" in t for t in texts["checkpoints/math_rl"])  # inputs, nested
            assert not {a: [t for t in ts if old in t] for a, ts in texts.items() if any(old in t for t in ts)}
            status = _status(capsys)
            assert all(r["materialized"] for r in status.values())
            assert not [a for a, r in status.items() if r["stale"]]
            tree = _lineage(capsys, "math_rl")
            inside = [p for p in _paths(tree) if p.startswith(str(moved.resolve()))]
            assert Path(tree["path"]).is_relative_to(moved.resolve()) and len(inside) > 10
            assert all(Path(p).exists() for p in inside)
            capsys.readouterr()
            report = tmp_path_factory.mktemp("report") / "report.json"
            assert main(["report", "--recipe", TINY, "--json", str(report)]) == 0
            assert json.loads(report.read_text())["matrix"]["swe_rl"]["math"] is not None
    finally:
        away.rename(cascade)


def test_an_edited_record_is_stale_and_retrained(cascade: Path, capsys) -> None:
    """A hand-edited checkpoint record (spec.lineage_verify): every record of a full run verifies;
    after the edit `status` shows the checkpoint stale with both values, `lineage` marks it,
    `verify-home` exits 1, and `run --stale` trains it again instead of reusing it."""
    capsys.readouterr()
    assert main(["verify-home"]) == 0, capsys.readouterr().out  # no false alarm anywhere in a real home
    folder = Path(_lineage(capsys, "swe_rl")["path"])
    record = json.loads((folder / "lineage.json").read_text())
    (folder / "lineage.json").write_text(json.dumps(record | {"data_version": "abc123"}))
    cause = f"checkpoints/swe_rl: lineage.json says data_version abc123 but its folder is {folder.name}"

    status = _status(capsys)
    assert status["swe_rl"]["stale"] and status["swe_rl"]["stale_causes"][0] == cause
    assert status["eval_swe_rl"]["stale"] and status["forgetting_matrix"]["stale"]
    assert not status["code_rl"]["stale"]
    assert cause in _lineage(capsys, "swe_rl")["problems"]
    assert main(["verify-home"]) == 1 and f"MISMATCH {cause}" in capsys.readouterr().out

    assert main(["run", "--stale", "--recipe", TINY]) == 0
    assert not [a for a, r in _status(capsys).items() if r["stale"]]
    assert json.loads((folder / "lineage.json").read_text())["data_version"] == folder.name  # trained again
    assert [p for p in folder.parent.iterdir() if p.name.startswith(f".unverified-{folder.name}-")]  # kept aside
    capsys.readouterr()
    assert main(["verify-home"]) == 0, capsys.readouterr().out
