"""The NeuronCore utilization grid: rows ND0…, columns NC0…, bar + percentage (or TFLOPs)."""
from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from tui.braille import bar
from tui.fmt import percent, tflops
from tui.view import NO_DEVICE, CoreGrid, average_label
from tui.widgets.base import LineWidget, strip
from tui.widgets.usage import Group, usage_lines

LABEL_WIDTH = 5
HISTORY_MIN_WIDTH = 110  # the per-app history column shows from this width (and a tall screen)
GAP = " │ "


class CoreGridView(LineWidget, can_focus=True):
    """Attributes down: ``grid``, ``show_flops``, ``selected``. Messages up: ``CoreSelected``."""

    COMPONENT_CLASSES = {"coregrid--low", "coregrid--mid", "coregrid--high", "coregrid--idle",
                         "coregrid--label", "coregrid--selected", "usage--label", "usage--value",
                         "usage--graph", "usage--muted"}
    DEFAULT_CSS = """
    CoreGridView { height: auto; }
    CoreGridView > .coregrid--low { color: $success; }
    CoreGridView > .coregrid--mid { color: $warning; }
    CoreGridView > .coregrid--high { color: $error; }
    CoreGridView > .coregrid--idle { color: $text-muted; }
    CoreGridView > .coregrid--label { color: $text-accent; text-style: bold; }
    CoreGridView > .coregrid--selected { text-style: reverse bold; }
    CoreGridView > .usage--label { text-style: bold; }
    CoreGridView > .usage--value { text-style: bold; }
    CoreGridView > .usage--graph { color: $accent; }
    CoreGridView > .usage--muted { color: $text-muted; }
    """
    BINDINGS = [
        Binding("left", "move(-1, 0)", "core left", show=False),
        Binding("right", "move(1, 0)", "core right", show=False),
        Binding("up", "move(0, -1)", "device up", show=False),
        Binding("down", "move(0, 1)", "device down", show=False),
    ]

    class CoreSelected(Message):
        def __init__(self, core: int) -> None:
            super().__init__()
            self.core = core

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.grid: CoreGrid | None = None
        self.show_flops = False
        self.selected = 0
        self.groups: list[Group] = []  # utilization history per app, drawn at the right
        # Content rows it may take (None: all its lines): the app leaves the memory tree below
        # a few rows (its own height is content-sized: Textual never shrinks it to fit).
        self.max_rows: int | None = None
        self._styles: dict = {}
        self.waiting = "waiting for the first report"   # the app says when none will come

    def show(self, grid: CoreGrid, show_flops: bool, selected: int,
             groups: list[Group] | None = None, top_core: int | None = None) -> None:
        """`top_core`: scroll that core's row to the top (an app tab just chosen: its own
        devices come into view, not the rows above them), the selection still kept in view."""
        self.grid, self.show_flops, self.selected = grid, show_flops, selected
        self.groups = groups or []
        self.set_title(self.heading())
        if top_core is not None and self.size.height > 1:
            self.top_row = max(0, top_core // grid.cores_per_device)
            self.invalidate(layout=True)
            self.clamp_scroll(self.size.height)
        self._keep_selected_visible()
        self.invalidate(layout=True)

    def limit_rows(self, rows: int | None) -> None:
        if rows != self.max_rows:
            self.max_rows = rows
            self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        lines = super().get_content_height(container, viewport, width)
        return lines if self.max_rows is None else max(1, min(lines, self.max_rows))

    def heading(self) -> str:
        grid = self.grid
        if grid is None:
            return f"NeuronCore Utilization ({self.waiting})"
        version = f"NeuronCore {grid.core_version} " if grid.core_version else "NeuronCore "
        if self.show_flops:
            total = grid.total_flops
            return (f"{version}TFLOPs (Total: {tflops(total)}; "
                    f"full bar: busiest core, {tflops(grid.flops_top)})")
        return f"{version}Utilization ({average_label(grid)})"

    def history_width(self, width: int) -> int:
        """Cells of the history column: a third of a wide grid whose rows all fit, else none."""
        if width < HISTORY_MIN_WIDTH or not self.groups or self.grid is None:
            return 0
        if self.size.height and self.size.height < self.grid.devices + 1:
            return 0  # the rows scroll (a short terminal): the history would scroll with them
        return width // 3

    def column_width(self, width: int) -> int:
        per_device = self.grid.cores_per_device if self.grid else 1
        history = self.history_width(width)
        grid_width = width - history - len(GAP) if history else width
        return max(6, (grid_width - LABEL_WIDTH) // per_device)

    def build_lines(self, width: int) -> list[Strip]:
        grid = self.grid
        if grid is None:
            return [strip([(f"{self.waiting}…", self.style_of("coregrid--idle"))])]
        if not grid.devices:
            return [strip([(NO_DEVICE.strip(), self.style_of("coregrid--idle"))])]
        col = self.column_width(width)
        # Resolve each component style once per build, not once per cell.
        self._styles = {name: self.style_of(name) for name in self.COMPONENT_CLASSES}
        label = self._styles["coregrid--label"]
        header = [(" " * LABEL_WIDTH, None)]
        header += [(f"NC{c}".ljust(col), label) for c in range(grid.cores_per_device)]
        rows = [header]
        for device in range(grid.devices):
            parts = [(f"ND{device}".ljust(LABEL_WIDTH), label)]
            for local in range(grid.cores_per_device):
                parts += self._cell(device * grid.cores_per_device + local, col)
            rows.append(parts)
        history = self.history_width(width)
        if history:
            grid_width = width - history - len(GAP)
            muted = self._styles["usage--muted"]
            for parts, extra in zip(rows, usage_lines(self.groups, history, len(rows))):
                used = sum(len(text) for text, _ in parts)
                parts.append((" " * max(0, grid_width - used) + GAP, muted))
                parts += [(text, self._styles[name]) for text, name in extra]
        return [strip(parts) for parts in rows]

    def _cell(self, core: int, col: int) -> list[tuple]:
        grid = self.grid
        util = float(grid.utilization[core])
        if self.show_flops:  # the bar shows the figure printed beside it, not utilization
            flops, top = float(grid.flops[core]), grid.flops_top
            known = flops == flops  # NaN: the stream has no flops for this core (N/A, not 0)
            ratio = flops / top if known and top > 0 else 0.0
            value = tflops(flops if known else None)
        elif util != util:     # NaN: a runtime whose counters failed may hold this core
            ratio, value = 0.0, percent(None)
        else:
            ratio, value = util, percent(util)
        number = f"[{value:>7}]"
        bar_width = col - len(number) - 2
        level = ("coregrid--idle" if not grid.in_use[core] else "coregrid--high" if ratio >= 0.8
                 else "coregrid--mid" if ratio >= 0.5 else "coregrid--low")
        number_style = self._styles["coregrid--selected"] if core == self.selected else None
        if bar_width < 2:
            return [(number, number_style), (" " * (col - len(number)), None)]
        return [(bar(ratio, bar_width), self._styles[level]), (" ", None), (number, number_style),
                (" ", None)]

    def _keep_selected_visible(self) -> None:
        if self.grid is None or self.size.height <= 1:
            return
        row = 1 + self.selected // self.grid.cores_per_device
        visible = self.size.height
        # Line 0 (the NC header) scrolls with the rest; keep the selected row on screen.
        if row < self.top_row + 1:
            self.top_row = max(0, row - 1)
        elif row >= self.top_row + visible:
            self.top_row = row - visible + 1

    def render_line(self, y: int) -> Strip:
        if y == 0 and self.top_row > 0:  # the NC header stays put while device rows scroll
            return self.lines_for(self.size.width)[0]
        return super().render_line(y)

    def action_move(self, dx: int, dy: int) -> None:
        grid = self.grid
        if grid is None or not grid.devices:
            return
        per_device = grid.cores_per_device
        device = min(max(self.selected // per_device + dy, 0), grid.devices - 1)
        local = min(max(self.selected % per_device + dx, 0), per_device - 1)
        self.post_message(self.CoreSelected(device * per_device + local))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        grid = self.grid
        if grid is None or offset.y < 1:
            return
        device = offset.y - 1 + self.top_row
        local = (offset.x - LABEL_WIDTH) // self.column_width(self.size.width)
        if 0 <= device < grid.devices and 0 <= local < grid.cores_per_device and offset.x >= LABEL_WIDTH:
            self.post_message(self.CoreSelected(device * grid.cores_per_device + local))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll(1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll(-1)

    def _scroll(self, delta: int) -> None:
        total = len(self.lines_for(self.size.width))
        self.top_row = min(max(self.top_row + delta, 0), max(0, total - self.size.height))
        self.refresh()

    def on_resize(self, event: events.Resize) -> None:
        self.invalidate()  # whether the history column fits depends on the height
        self.clamp_scroll(self.size.height)
        self._keep_selected_visible()
