"""The help screen: every key of the screen it was asked on, from ``tui.keys``."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.keys import help_lines


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $accent; background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "close", "close help")]

    def __init__(self, version: str, lines: list[tuple[str, str]] | None = None,
                 title: str = "keys") -> None:
        super().__init__()
        self.version = version
        self.lines = help_lines() if lines is None else lines
        self.title = title

    def compose(self) -> ComposeResult:
        text = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        text.add_column(style="bold", no_wrap=True, max_width=26)
        text.add_column(ratio=1)
        for key, description in self.lines:
            text.add_row(Text(key), Text(description))
        with VerticalScroll() as scroll:
            scroll.border_title = f"neuron-top {self.version}: {self.title}"
            scroll.border_subtitle = "esc / ? closes"
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)
