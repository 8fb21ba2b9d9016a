"""A fake store for running asset bodies without a Dagster instance (tests/assets).

`FakeStore` is the real `assets.store.CascadeStore` with its one event-log read replaced: the
upstream outputs come from a dict and the home is a test folder, so a test hands an asset its
inputs by name and finds its output under that folder. Verification (the upstream's lineage
record must check out) is the real one.
"""

from typing import Any

import dagster as dg

from assets.store import STORE, CascadeStore, Context


class FakeStore(CascadeStore):
    """A store whose home is a test folder and whose upstream outputs come from `outputs`."""

    outputs: dict[str, dict[str, str]] = {}
    """{asset key as "group/name": its latest metadata, at least `path` and `data_version`}."""

    def recorded_metadata(self, context: Context, asset_key: dg.AssetKey) -> dict[str, Any]:
        """The upstream's entry in `outputs`; dg.Failure, as the real store, when it has none."""
        entry = self.outputs.get(asset_key.to_user_string())
        if entry is None:
            raise dg.Failure(f"upstream asset {asset_key.to_user_string()} has not been materialized")
        return dict(entry)

    def with_output(self, asset_key: dg.AssetKey, output: "dg.MaterializeResult | dict[str, str]") -> "FakeStore":
        """This store with one more upstream output: an asset's result, or its metadata."""
        entry = output_of(output) if isinstance(output, dg.MaterializeResult) else output
        return FakeStore(home=self.home, outputs={**self.outputs, asset_key.to_user_string(): entry})


def output_of(result: dg.MaterializeResult) -> dict[str, str]:
    """The `outputs` entry an asset's result makes: its `path` (as stored) and `data_version`."""
    meta = result.metadata or {}
    path, version = meta["path"], meta["data_version"]
    return {"path": str(getattr(path, "value", path)), "data_version": str(getattr(version, "value", version))}


def asset_context(store: FakeStore) -> dg.AssetExecutionContext:
    """A context for calling an asset body directly with `store` as its resource."""
    return dg.build_asset_context(resources={STORE: store})


def check_context(store: FakeStore) -> Any:
    """A context for calling an asset check body directly with `store` as its resource."""
    return dg.build_asset_check_context(resources={STORE: store})
