"""The key footer: neuron-top's keys for the current view, most important first.

Textual's Footer lists bindings in declaration order and cuts the line at the terminal's edge;
this one drops whole entries from the low-priority end instead, so at 80 columns every key that
stays is readable, and ``?`` (help, which lists every key) always stays.
"""
from __future__ import annotations

from textual import events
from textual.strip import Strip

from tui.keys import footer_entries
from tui.widgets.base import LineWidget, strip


class KeyFooter(LineWidget):
    """Attributes down: ``view``, ``readonly``. A click on an entry runs its action."""

    COMPONENT_CLASSES = {"keyfooter--key", "keyfooter--label"}
    DEFAULT_CSS = """
    KeyFooter { height: 1; background: $panel; }
    KeyFooter > .keyfooter--key { color: $text-accent; text-style: bold; }
    KeyFooter > .keyfooter--label { color: $text; }
    """

    def __init__(self, *, id: str | None = None, view: str = "overview") -> None:
        super().__init__(id=id)
        self.view, self.readonly = view, False
        self._spans: list[tuple[int, int, str]] = []

    def show(self, view: str, readonly: bool) -> None:
        if (view, readonly) != (self.view, self.readonly):
            self.view, self.readonly = view, readonly
            self.invalidate()

    def fitting_entries(self, width: int) -> list[tuple[str, str, str]]:
        entries = footer_entries(self.view, self.readonly)
        def length() -> int:
            return sum(len(k) + len(label) + 3 for k, label, _ in entries) + 1
        while len(entries) > 2 and length() > width:
            entries.pop()
        return entries

    def build_lines(self, width: int) -> list[Strip]:
        parts, x, self._spans = [(" ", None)], 1, []
        key_style, label_style = self.style_of("keyfooter--key"), self.style_of("keyfooter--label")
        for keys, label, action in self.fitting_entries(width):
            parts += [(keys, key_style), (" " + label + "  ", label_style)]
            self._spans.append((x, x + len(keys) + 1 + len(label), action))
            x += len(keys) + len(label) + 3
        return [strip(parts)]

    def text(self) -> str:
        return self.lines_for(self.size.width)[0].text if self.size.width else ""

    async def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        for start, end, action in self._spans:
            if start <= offset.x < end and action:
                await self.app.run_action(action)
