"""The overview's container: AWS's sections top to bottom, the memory tree always in sight."""
from __future__ import annotations

from textual import events
from textual.containers import Vertical

from tui.widgets.grid import CoreGridView
from tui.widgets.tree import MemoryTreeView

TREE_MIN_ROWS = 3  # memory tree rows kept on screen; the grid gives up device rows first
GRID_MIN_ROWS = 2  # the grid's NC header and one device row


class Overview(Vertical):
    """Grid, vCPU, memory summary and memory tree. The sections above the tree are as tall as
    their content, and Textual never shrinks those to fit: a short terminal or a tall banner
    pushed the whole tree off the bottom (its focused selection moved unseen). The grid, which
    scrolls to follow the selected core, gives up device rows instead."""

    def on_resize(self, event: events.Resize) -> None:
        self.fit()

    def fit(self) -> None:
        """Re-share the rows; call once new data has changed a section's height."""
        if not self.display or not self.size.height:
            return   # hidden (another view): it is fitted when it shows again
        grid, tree = self.query_one(CoreGridView), self.query_one(MemoryTreeView)
        between = sum(child.outer_size.height for child in self.children
                      if child is not grid and child is not tree)
        tree_rows = TREE_MIN_ROWS + 1 + tree.styles.gutter.height   # and its column line
        room = self.size.height - between - tree_rows - grid.styles.gutter.height
        grid.limit_rows(max(GRID_MIN_ROWS, room))
