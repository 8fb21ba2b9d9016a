"""The Dagster UI end to end: `dagster dev` on 127.0.0.1, the asset graph in headless Chromium,
a materialization launched through the UI's GraphQL API (a source, and a checkpoint with all it
reads), the checkpoint's page showing its lineage as a linked table and its corpus's page its row
accounting, both saved as the screenshots the docs show (docs/images/), then everything stopped
by PID."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from spec.paths import REPO_ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed")]

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on InvalidSubsetError { message } ... on RunConfigValidationInvalid { errors { message } } } }"""
RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"""
SHARDED = "chat_sft"
METADATA = """{ assetNodes { assetKey { path } metadataEntries { label
  ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } } } }"""
LOCATIONS = """{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"""
LATEST = """query($path: [String!]!) { assetOrError(assetKey: {path: $path}) { ... on Asset {
  assetMaterializations(limit: 1) { metadataEntries { label ... on MarkdownMetadataEntry { mdStr }
  ... on IntMetadataEntry { intValue } } } } } }"""
GRAPH = "{ assetNodes { assetKey { path } dependencyKeys { path } isMaterializable } }"
CHECKPOINT, CORPUS = ("checkpoints", "sft_stage1"), ("corpora", "sft_stage1_data")
DOC_IMAGES = REPO_ROOT / "docs" / "images"
VIEWPORT = {"width": 1440, "height": 900}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["data"]


def _wait_until(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # noqa: BLE001 - server still starting
            pass
        time.sleep(1)
    raise TimeoutError(f"timed out waiting for {what}")


@pytest.fixture()
def dagster_server(tmp_path: Path):
    import yaml

    from dagster_project.commands import ensure_instance_config

    port = _free_port()
    # The tiny recipe with one sharded source, so the UI shows shards and an executor on its assets.
    recipe = yaml.safe_load((REPO_ROOT / "recipes" / "tiny.yaml").read_text())
    next(s for s in recipe["sources"] if s["name"] == SHARDED)["shards"] = 2
    # The checkpoint the UI launches reads two sources, not seven (each step of the run is a process of its
    # own): the sharded one, and swe_pool, part of whose rows the corpus drops (the SWE split), so the
    # accounting lists reasons.
    recipe["sft_stages"][0]["sources"] = [SHARDED, "swe_pool"]
    (tmp_path / "tiny_sharded.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "CASCADE_HOME": str(tmp_path / "home"),
           "CASCADE_RECIPE": str(tmp_path / "tiny_sharded.yaml"), "HF_HUB_OFFLINE": "1"}
    ensure_instance_config(tmp_path / "dagster")  # what `make ui` writes: no first-visit pop-up
    dagster = Path(sys.executable).parent / "dagster"
    log = open(tmp_path / "dagster.log", "w")
    # Own session + SIGINT not ignored: `dagster dev` shuts its children down cleanly on SIGINT.
    proc = subprocess.Popen([str(dagster), "dev", "-m", "dagster_project.definitions", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).status == 200,
                    180, "dagster webserver")
        yield port, proc
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        # Nothing of the server's process group (webserver, code server, daemon) may survive.
        if not _wait_group_gone(proc.pid, 30):
            os.killpg(proc.pid, signal.SIGKILL)
        assert _wait_group_gone(proc.pid, 10)


def _assert_nothing_covers(page) -> None:
    """No dialog or overlay (the first-visit newsletter pop-up, say) is open over the page."""
    assert page.locator("[role=dialog]").count() == 0, "a dialog is open"
    assert page.locator(".bp5-overlay-open .bp5-dialog, .bp4-overlay-open .bp4-dialog").count() == 0, "an overlay is open"
    covered = page.evaluate("""() => { const e = document.elementFromPoint(innerWidth / 2, innerHeight / 2);
        return !!(e && e.closest('[role=dialog], .bp5-overlay, .bp4-overlay, .bp5-dialog-container, .bp4-dialog-container')); }""")
    assert not covered, "the centre of the page is covered by an overlay"


def _latest_metadata(port: int, path: tuple[str, ...]) -> dict:
    """The markdown and integer entries of an asset's latest materialization, by label."""
    [event] = _graphql(port, LATEST, {"path": list(path)})["assetOrError"]["assetMaterializations"]
    return {e["label"]: e.get("mdStr", e.get("intValue")) for e in event["metadataEntries"]}


def _upstream(port: int, path: tuple[str, ...]) -> list[list[str]]:
    """`path` and every materializable asset it reads, directly or not, from the UI's asset graph."""
    nodes = {tuple(n["assetKey"]["path"]): n for n in _graphql(port, GRAPH)["assetNodes"]}
    todo, seen = [path], set()
    while todo:
        node = nodes[todo.pop()]
        key = tuple(node["assetKey"]["path"])
        if key not in seen and node["isMaterializable"]:
            seen.add(key)
            todo += [tuple(d["path"]) for d in node["dependencyKeys"]]
    return sorted(list(k) for k in seen)


def _metadata_shot(page, port: int, path: tuple[str, ...], key: str, name: str) -> None:
    """An asset's page scrolled to its metadata, the row `key` in view, saved as docs/images/`name`
    (a palette PNG: a few tens of kB)."""
    from PIL import Image

    page.goto(f"http://127.0.0.1:{port}/assets/{'/'.join(path)}", wait_until="networkidle", timeout=120_000)
    page.locator("td", has_text=key).first.wait_for(timeout=120_000)
    page.evaluate("""() => { const h = [...document.querySelectorAll('*')].find(
        e => e.children.length === 0 && e.textContent.trim() === 'Metadata'); h.scrollIntoView({block: 'start'}); }""")
    page.wait_for_timeout(1000)
    _assert_nothing_covers(page)
    DOC_IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOC_IMAGES / name))
    image = Image.open(DOC_IMAGES / name).convert("RGB")
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(DOC_IMAGES / name, optimize=True)


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def test_asset_graph_page_and_materialize_from_ui(dagster_server, tmp_path: Path) -> None:
    port, _ = dagster_server
    from playwright.sync_api import sync_playwright

    # A run launched through the UI's API: one source, and a checkpoint with everything it reads.
    repo = _graphql(port, LOCATIONS)["repositoriesOrError"]["nodes"][0]
    selection = [["sources", "raw_math_prompts"], *_upstream(port, CHECKPOINT)]
    assert list(CORPUS) in selection and ["checkpoints", "base_model"] in selection
    params = {"selector": {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                           "jobName": "cascade", "assetSelection": [{"path": p} for p in selection]},
              "runConfigData": {}}
    launched = _graphql(port, LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            # The global asset graph: one node per recipe group.
            page.goto(f"http://127.0.0.1:{port}/asset-groups", wait_until="networkidle", timeout=120_000)
            page.wait_for_selector("text=Global asset lineage", timeout=120_000)
            for group in ("sources", "curated", "corpora", "checkpoints", "evals"):
                page.wait_for_selector(f"text={group}", timeout=60_000)
            page.wait_for_timeout(3000)  # the first-visit pop-up, when enabled, opens after its query returns
            page.screenshot(path=str(tmp_path / "asset_graph.png"))
            _assert_nothing_covers(page)
            # The sharded source's curated asset shows its shards and the executor.
            page.goto(f"http://127.0.0.1:{port}/assets/curated/clean_{SHARDED}",
                      wait_until="networkidle", timeout=120_000)
            page.wait_for_selector("text=crc32(raw line) mod shards", timeout=120_000)
            page.wait_for_selector("text=multiprocess", timeout=60_000)
            page.screenshot(path=str(tmp_path / "sharded_asset.png"))
            _assert_nothing_covers(page)
            # The catalog lists the generated checkpoint assets.
            page.goto(f"http://127.0.0.1:{port}/assets?view=flat", wait_until="networkidle", timeout=120_000)
            page.wait_for_selector("text=math_rl", timeout=120_000)
            page.screenshot(path=str(tmp_path / "catalog.png"))

            status = _wait_until(
                lambda: (s := _graphql(port, RUN_STATUS, {"id": run_id})["runOrError"]["status"]) in ("SUCCESS", "FAILURE", "CANCELED") and s,
                1800, "the launched run")
            assert status == "SUCCESS"
            # What the pages show is the latest materialization's metadata: the accounting's numbers
            # are the record's counts (the terminal's: dagster_project.accounting), the lineage the inputs'.
            corpus, checkpoint = _latest_metadata(port, CORPUS), _latest_metadata(port, CHECKPOINT)
            assert f"| in | {corpus['rows_in']} |" in corpus["accounting"]
            assert f"| kept | {corpus['rows_out']} |" in corpus["accounting"]
            assert "parent: [base_model](/assets/checkpoints/base_model)" in checkpoint["lineage"]
            assert f"SFT data: [{CORPUS[1]}](/assets/{'/'.join(CORPUS)})" in checkpoint["lineage"]

            page.get_by_text("Hide navigation").click()  # the metadata column gets the width
            # The checkpoint's lineage: a table of its inputs (role: linked asset, version), not JSON.
            _metadata_shot(page, port, CHECKPOINT, "lineage", "ui_checkpoint.png")
            lineage = page.locator("td", has_text="code version").last
            assert lineage.locator("table").count() == 1 and lineage.locator("a").count() == 2
            assert "parent: base_model" in lineage.inner_text() and f"SFT data: {CORPUS[1]}" in lineage.inner_text()
            # the link leads to the input's own page
            lineage.locator("a", has_text="sft_stage1_data").click()
            page.wait_for_url(f"**/assets/{'/'.join(CORPUS)}**", timeout=60_000)
            # The corpus's accounting: the terminal's numbers, every drop reason with its count.
            _metadata_shot(page, port, CORPUS, "accounting", "ui_dataset.png")
            shown = page.locator("td", has_text="dropped because").last.inner_text()
            assert re.search(rf"\bin\s+{corpus['rows_in']}\s+kept\s+{corpus['rows_out']}\s+quarantined\s+0\s", shown), shown
        finally:
            browser.close()

    nodes = _graphql(port, METADATA)["assetNodes"]
    meta = {n["assetKey"]["path"][-1]: {e["label"]: e.get("text", e.get("intValue")) for e in n["metadataEntries"]}
            for n in nodes}
    sharded = meta[f"clean_{SHARDED}"]
    assert {k: sharded.get(k) for k in ("shards", "executor", "sharding")} == {
        "shards": 2, "executor": "multiprocess", "sharding": "crc32(raw line) mod shards"}, sharded
    assert meta["clean_math_sft"]["shards"] == 1 and meta["clean_math_sft"]["executor"] == "multiprocess"
    names = {n["assetKey"]["path"][-1] for n in nodes}
    assert {"base_model", "sft_stage1", "sft_stage2", "reward_model", "rlhf", "if_rl", "math_rl", "code_rl",
            "swe_rl", "eval_swe_rl", "forgetting_matrix", "math_rl_prompts", "clean_math_prompts"} <= names
