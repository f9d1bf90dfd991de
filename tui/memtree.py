"""The "Memory Usage Details" tree as data: ND -> NC -> model -> categories.

Nodes carry a stable key (a tuple) so expansion state survives new reports, and
``visible_rows`` flattens the tree for a given set of expanded keys.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.report import LoadedModel, RuntimeReport
from tui.view import DEVICE_CATEGORIES, usable

_CATEGORY_LABELS = dict(DEVICE_CATEGORIES)


@dataclass(frozen=True, slots=True)
class TreeNode:
    key: tuple
    label: str
    model_id: int | None
    device_bytes: int
    host_bytes: int | None
    children: tuple[TreeNode, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class TreeRow:
    node: TreeNode
    depth: int
    expanded: bool


def _category_nodes(prefix: tuple, breakdown: dict[str, int]) -> tuple[TreeNode, ...]:
    return tuple(TreeNode((*prefix, key), _CATEGORY_LABELS.get(key, key), None, breakdown.get(key, 0),
                          None) for key, _ in DEVICE_CATEGORIES if key in breakdown)


def _unattributed(prefix: tuple, breakdown: dict[str, int], in_models: dict[str, int],
                  has_models: bool) -> tuple[TreeNode, ...]:
    """The core's memory that no loaded model accounts for (runtime memory, scratchpad...), as
    one labelled node: the models' own categories already sit under each model, and listing the
    core's categories again beside them would read as twice the memory."""
    rest = {k: v - in_models.get(k, 0) for k, v in breakdown.items() if v > in_models.get(k, 0)}
    if not rest:
        return ()
    key = (*prefix, "unattributed")
    label = "not in a model" if has_models else "core memory"
    return (TreeNode(key, label, None, sum(rest.values()), None, _category_nodes(key, rest)),)


def _models_by_core(models: Iterable[LoadedModel], per_device: int,
                    in_models: dict[int, dict[str, int]]) -> dict[int, list[TreeNode]]:
    """Model nodes per global core; adds each core's model memory by category to ``in_models``."""
    found: dict[int, list[TreeNode]] = {}
    for model in models:
        for sub in model.subgraphs.values():
            core = sub.global_core(per_device)
            key = ("model", core, model.model_id, model.uuid)
            breakdown = dict(sub.device_breakdown)
            node = TreeNode(key, model.name, model.model_id, sub.device_bytes, sub.host_bytes,
                            _category_nodes(key, breakdown))
            found.setdefault(core, []).append(node)
            sums = in_models.setdefault(core, {})
            for name, value in breakdown.items():
                sums[name] = sums.get(name, 0) + value
    return found


def build_tree(runtimes: Iterable[RuntimeReport], per_device: int) -> tuple[TreeNode, ...]:
    """One ND node per device that holds memory, in device order."""
    per_device = max(per_device, 1)
    core_memory: dict[int, dict[str, int]] = {}
    models: dict[int, list[TreeNode]] = {}
    in_models: dict[int, dict[str, int]] = {}
    for runtime in runtimes:
        used = usable(runtime.memory_used)   # a failed group holds no breakdown to show
        if used is None:
            continue
        for core, breakdown in used.core_breakdown.items():
            merged = core_memory.setdefault(core, {})
            for key, value in breakdown.items():
                merged[key] = merged.get(key, 0) + value
        for core, nodes in _models_by_core(used.loaded_models or (), per_device, in_models).items():
            models.setdefault(core, []).extend(nodes)
    devices: dict[int, list[TreeNode]] = {}
    for core in sorted(set(core_memory) | set(models)):
        breakdown = core_memory.get(core, {})
        core_models = tuple(models.get(core, ()))
        key = ("nc", core)
        hosts = [m.host_bytes for m in core_models if m.host_bytes is not None]
        host = sum(hosts) if hosts else None      # unknown (a fleet's), not 0
        children = core_models + _unattributed(key, breakdown, in_models.get(core, {}),
                                               bool(core_models))
        # The core is what its children add up to: its models and the memory none of them
        # holds. A stream whose core breakdown leaves out a model's memory (AWS's own example:
        # 0 B on a core that holds a 20 MB model) must not show a core smaller than its model.
        node = TreeNode(key, f"NC {core}", None, sum(c.device_bytes for c in children), host,
                        children)
        devices.setdefault(core // per_device, []).append(node)
    return tuple(_device_node(device, tuple(cores)) for device, cores in sorted(devices.items()))


def _device_node(device: int, cores: tuple[TreeNode, ...]) -> TreeNode:
    hosts = [c.host_bytes for c in cores if c.host_bytes is not None]
    return TreeNode(("nd", device), f"ND {device}", None, sum(c.device_bytes for c in cores),
                    sum(hosts) if hosts else None, cores)


def visible_rows(roots: Iterable[TreeNode], expanded: frozenset | set) -> list[TreeRow]:
    rows: list[TreeRow] = []
    stack = [(node, 0) for node in reversed(tuple(roots))]
    while stack:
        node, depth = stack.pop()
        is_open = node.key in expanded
        rows.append(TreeRow(node, depth, is_open))
        if is_open:
            stack.extend((child, depth + 1) for child in reversed(node.children))
    return rows


def all_branch_keys(roots: Iterable[TreeNode]) -> set:
    keys: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.children:
            keys.add(node.key)
            stack.extend(node.children)
    return keys
