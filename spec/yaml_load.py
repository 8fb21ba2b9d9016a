"""Bounded YAML: recipe text parsed with aliases expanded under a size limit.

YAML anchors make a small file describe a huge value: nine levels of nine aliases (the
"billion laughs") is a few hundred bytes that PyYAML loads in milliseconds as a graph of
*shared* nodes, and that blows up only later, when something walks it as a tree (pydantic's
`model_dump` of a free-form `train.vllm` went past 7.7 GB). So the size that matters is the
*expanded* one: every node counted once per path that reaches it.

`load_yaml(text)` composes the node graph (linear in the text: an alias is a reference, not a
copy), measures its expanded size and depth with one memoised walk (linear in the distinct
nodes, whatever the expansion), and refuses the document before a single Python object is
constructed when it is over `MAX_NODES` expanded nodes or `MAX_DEPTH` levels, or when an
alias refers to itself. A few legitimate anchors (a shared `train:` block) cost nothing.

`check_bounded(value)` is the same measure for Python values (shared references counted once
per reference, cycles refused), so data that never went through this loader (a recipe
mapping built in code, a `--set` value) gets the same bound; `BoundedDict` is the annotated
type for free-form `dict[str, Any]` fields.
"""

from __future__ import annotations

from typing import Annotated, Any

import yaml
from pydantic import AfterValidator

MAX_NODES = 100_000
"""Most nodes (scalars, lists, mappings, each counted once per reference) a recipe may expand to."""
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings a recipe may have."""


class YamlBoundsError(ValueError):
    """A YAML document or value that expands past the node or depth limit, or refers to itself."""


def _measure(root: Any, children: Any, limit: int, max_depth: int, what: str) -> int:
    """Expanded size of a graph from `root` (`children(node)` lists a node's children), memoised
    per node so a shared node costs one visit; raises YamlBoundsError past `limit` or `max_depth`."""
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}  # levels below and including a node: a shared node reached deeper
    active: set[int] = set()
    keep: list[Any] = []  # holds every measured object, so no id is reused during the walk
    # Iterative post-order walk: deep input must not reach Python's recursion limit.
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        ident = id(node)
        if done:
            active.discard(ident)
            kids = children(node)
            total = 1 + sum(sizes[id(c)] for c in kids)
            if total > limit:
                raise YamlBoundsError(f"{what} expands to more than {limit:,} nodes (anchors and aliases "
                                      "are counted once per use); refused before building it")
            sizes[ident], heights[ident] = total, 1 + max(heights[id(c)] for c in kids)
            continue
        if ident in sizes:
            if depth - 1 + heights[ident] > max_depth:
                raise YamlBoundsError(f"{what} nests deeper than {max_depth} levels")
            continue
        if ident in active:
            raise YamlBoundsError(f"{what} refers to itself (a recursive alias or a cycle)")
        if depth > max_depth:
            raise YamlBoundsError(f"{what} nests deeper than {max_depth} levels")
        keep.append(node)
        kids = children(node)
        if not kids:
            sizes[ident], heights[ident] = 1, 1
            continue
        active.add(ident)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in kids)
    return sizes[id(root)]


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _value_children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [v for pair in value.items() for v in pair]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return []


def node_count(node: yaml.Node, limit: int = MAX_NODES, max_depth: int = MAX_DEPTH, what: str = "YAML") -> int:
    """Expanded node count of a composed YAML node graph (YamlBoundsError past the limits)."""
    return _measure(node, _node_children, limit, max_depth, what)


class BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that measures the composed graph before constructing anything."""

    max_nodes = MAX_NODES
    max_depth = MAX_DEPTH
    measured = 0
    """Expanded node count of the last document (for tests and diagnostics)."""

    def construct_document(self, node: yaml.Node) -> Any:
        self.measured = node_count(node, self.max_nodes, self.max_depth, "the YAML document")
        return super().construct_document(node)


def load_yaml(text: str | bytes, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """`yaml.safe_load(text)` with aliases expanded under `max_nodes` and nesting under `max_depth`.

    Raises YamlBoundsError (a ValueError) for a document over the limits and yaml.YAMLError
    for one that is not YAML.
    """
    loader = BoundedLoader(text)
    loader.max_nodes, loader.max_depth = max_nodes, max_depth
    try:
        return loader.get_single_data()
    except RecursionError:  # the composer recurses per nesting level
        raise YamlBoundsError(f"the YAML document nests deeper than {max_depth} levels") from None
    finally:
        loader.dispose()


def check_bounded(value: Any, what: str = "value", max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """`value` unchanged if its expanded size (each shared object counted per reference) and depth
    are within the limits; YamlBoundsError otherwise (also for a value that contains itself)."""
    _measure(value, _value_children, max_nodes, max_depth, what)
    return value


def _check_field(value: dict[str, Any]) -> dict[str, Any]:
    return check_bounded(value, "this free-form block")


BoundedDict = Annotated[dict[str, Any], AfterValidator(_check_field)]
"""A free-form `dict[str, Any]` field whose expanded size and depth are bounded (MAX_NODES, MAX_DEPTH)."""
