"""The overview's container: AWS's sections top to bottom, the memory tree always in sight."""
from __future__ import annotations

from textual import events
from textual.containers import Vertical
from textual.widget import Widget

from tui.widgets.base import LineWidget
from tui.widgets.grid import CoreGridView
from tui.widgets.panels import MemorySummaryView, VcpuPanel
from tui.widgets.tree import MemoryTreeView

TREE_MIN_ROWS = 3  # memory tree rows kept on screen; the grid gives up device rows first
GRID_MIN_ROWS = 2  # the grid's NC header and one device row
# The summaries between the grid and the tree, in the order they give way when even one device
# row leaves the tree short (80x16 under a three-line banner): the memory summary first, whose
# device figures the tree's rows break down, then the vCPU panel.
GIVE_WAY = (MemorySummaryView, VcpuPanel)


def natural_height(section: LineWidget, width: int) -> int:
    """The rows ``section`` takes when shown: its lines and its frame (also while hidden)."""
    lines = section.lines_for(max(1, width - section.styles.gutter.width))
    return max(1, len(lines)) + section.styles.gutter.height


class Overview(Vertical):
    """Grid, vCPU, memory summary and memory tree. The sections above the tree are as tall as
    their content, and Textual never shrinks those to fit: a short terminal or a tall banner
    pushed the whole tree off the bottom (its focused selection moved unseen). The grid, which
    scrolls to follow the selected core, gives up device rows instead; when its last one is not
    enough, the summaries step aside (GIVE_WAY), and come back when the room does."""

    def on_resize(self, event: events.Resize) -> None:
        self.fit()

    def fit(self) -> None:
        """Re-share the rows; call once new data has changed a section's height."""
        if not self.display or not self.size.height:
            return   # hidden (another view): it is fitted when it shows again
        grid, tree = self.query_one(CoreGridView), self.query_one(MemoryTreeView)
        tree_rows = TREE_MIN_ROWS + 1 + tree.styles.gutter.height   # and its column line
        grid_frame = grid.styles.gutter.height
        between = self._shown_summaries(self.size.height - tree_rows - grid_frame - GRID_MIN_ROWS)
        room = self.size.height - between - tree_rows - grid_frame
        grid.limit_rows(max(GRID_MIN_ROWS, room))

    def _shown_summaries(self, room: int) -> int:
        """Show the summaries that fit in ``room`` rows, hiding them in GIVE_WAY order; the rows
        the shown ones take."""
        heights: dict[Widget, int] = {
            section: natural_height(section, self.size.width)
            for section in self.children if isinstance(section, GIVE_WAY)}
        shown = set(heights)
        for kind in GIVE_WAY:
            if sum(heights[s] for s in shown) <= room:
                break
            shown -= {s for s in shown if isinstance(s, kind)}
        for section in heights:
            section.display = section in shown
        return sum(heights[s] for s in shown)
