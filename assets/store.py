"""The store: where an asset body reads its inputs and writes its output, as a Dagster resource.

Every asset, asset check and step op takes it as a parameter (`store: CascadeStore`, resource key
`"store"`, registered by `assets.build_definitions`) instead of reading Dagster's event log and
`$CASCADE_HOME` itself, so a body runs with a fake store (tests/assets/fakes.py) and no instance:

  root, data_root, checkpoint_root, eval_root   `<home>/`, `<home>/data`, `<home>/checkpoints`, `<home>/evals`
  upstream_metadata / _path / _ref              an upstream asset's latest output, after its lineage
                                                record verifies (assets.common.output_problems)
  write_dataset                                 a table written once under `<data>/<asset>/<content hash>/`

The one event-log read is `recorded_metadata`; a fake overrides it (and `home`), nothing else.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import dagster as dg

from assets.common import latest_metadata, verified
from spec.paths import cascade_home

if TYPE_CHECKING:
    import pyarrow as pa

    from curation.versioning import Versioned

Context = Union[dg.AssetExecutionContext, dg.OpExecutionContext, dg.AssetCheckExecutionContext]
"""What a body hands the store: only its `instance` (the event log) is read."""

STORE = "store"
"""The resource key the asset bodies take the store under."""


class CascadeStore(dg.ConfigurableResource):
    """The Cascade home: the upstream outputs an asset reads and the versioned folders it writes."""

    home: str = ""
    """Root of data, checkpoints and evals; "" means `$CASCADE_HOME` when it is used (spec.paths.cascade_home),
    so step processes and workers each resolve their own environment."""

    def root(self) -> Path:
        """The home folder, absolute."""
        return Path(self.home).expanduser().resolve() if self.home else cascade_home()

    def data_root(self) -> Path:
        """`<home>/data`: datasets (`<asset>/<content hash>/`)."""
        return self.root() / "data"

    def checkpoint_root(self) -> Path:
        """`<home>/checkpoints`: models (`<stage>/<input hash>/`)."""
        return self.root() / "checkpoints"

    def eval_root(self) -> Path:
        """`<home>/evals`: eval reports (`<stage>/<input hash>/`) and the forgetting matrix."""
        return self.root() / "evals"

    def recorded_metadata(self, context: Context, asset_key: dg.AssetKey) -> dict[str, Any]:
        """The metadata Dagster stored with an asset's latest materialization (or observation), not
        yet verified; a stored `${CASCADE_HOME}/…` path resolved against this store's home.
        Raises dg.Failure when the asset was never materialized."""
        return latest_metadata(context.instance, asset_key, self.root())

    def upstream_metadata(self, context: Context, asset_key: dg.AssetKey) -> dict[str, Any]:
        """An upstream asset's latest metadata (`path`, `data_version`, ...) after the output it
        points at verifies; dg.Failure naming the problems otherwise (`cascade run --stale` heals it)."""
        return verified(asset_key, self.recorded_metadata(context, asset_key))

    def upstream_path(self, context: Context, asset_key: dg.AssetKey) -> Path:
        """The folder (or file) of an upstream asset's latest output, after its record verifies."""
        return Path(self.upstream_metadata(context, asset_key)["path"])

    def upstream_ref(self, context: Context, asset_key: dg.AssetKey) -> dict[str, str]:
        """{asset, data_version, path} of an upstream output, as lineage records list inputs (verified)."""
        meta = self.upstream_metadata(context, asset_key)
        return {"asset": asset_key.path[-1], "data_version": str(meta["data_version"]), "path": str(meta["path"])}

    def write_dataset(self, table: "pa.Table", asset: str, **fields: Any) -> "Versioned":
        """`table` written under `<data>/<asset>/<content hash>/` with its lineage record, unless that
        version exists (curation.versioning.write_versioned; `fields` are its keyword arguments)."""
        from curation.versioning import write_versioned

        return write_versioned(table, self.data_root(), asset, **fields)
