"""The runtime processes under their parent processes (nvitop's tree view), as plain data.

``lineage`` walks a pid's parents with psutil; it runs off the UI thread (the app's worker) and
only for a source whose runtimes live on this host. ``tree_lines`` is a pure function of it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tui.procs import ProcessRow


@dataclass(frozen=True, slots=True)
class Ancestor:
    pid: int
    name: str
    user: str


@dataclass(frozen=True, slots=True)
class TreeLine:
    prefix: str  # the branch drawing before the name: "│  ├─ "
    ancestor: Ancestor | None  # a parent process line ...
    row: ProcessRow | None  # ... or a runtime's row


def lineage(pid: int, limit: int = 32) -> tuple[Ancestor, ...] | None:
    """The parents of ``pid``, outermost first (pid 1 ... its parent); None when ``pid`` is not
    a process on this host."""
    import psutil

    try:
        process = psutil.Process(pid)
        chain = []
        parent = process.parent()
        while parent is not None and len(chain) < limit:
            with parent.oneshot():
                try:
                    user = parent.username()
                except (psutil.Error, KeyError):  # a uid with no passwd entry
                    user = "?"
                chain.append(Ancestor(parent.pid, parent.name(), user))
            parent = parent.parent()
    except psutil.Error:
        return None
    return tuple(reversed(chain))


def tree_lines(rows: Iterable[ProcessRow], lineages: dict[int, tuple[Ancestor, ...] | None]
               ) -> list[TreeLine]:
    """Runtimes grouped under their shared parents, in the order of ``rows`` within a parent;
    runtimes whose parents are unknown (another host) come last, at the top level."""
    root: dict = {}  # Ancestor -> subtree; "rows" -> runtimes directly under this node
    unknown: list[ProcessRow] = []
    for row in rows:
        chain = lineages.get(row.pid)
        if chain is None:
            unknown.append(row)
            continue
        node = root
        for ancestor in chain:
            node = node.setdefault(ancestor, {})
        node.setdefault("rows", []).append(row)
    lines: list[TreeLine] = []

    def walk(node: dict, indent: str) -> None:
        children = [(k, v) for k, v in node.items() if k != "rows"]
        leaves = node.get("rows", [])
        count = len(children) + len(leaves)
        for index, item in enumerate([*children, *leaves]):
            last = index == count - 1
            branch = indent + ("└─ " if last else "├─ ")
            further = indent + ("   " if last else "│  ")
            if isinstance(item, tuple):
                lines.append(TreeLine(branch, item[0], None))
                walk(item[1], further)
            else:
                lines.append(TreeLine(branch, None, item))

    walk(root, "")
    lines += [TreeLine("? ", None, row) for row in unknown]
    return lines
