"""Small one-to-few-line sections: title, banner, vCPU, memory summary, the Neuron Apps bar."""
from __future__ import annotations

import os

from textual import events
from textual.message import Message
from textual.strip import Strip

from monitor.errors import one_line
from tui.faults import Fault
from tui.fmt import fit, human_bytes, percent, wrap_words
from tui.view import DEVICE_CATEGORIES, HOST_CATEGORIES, MemorySummary, VcpuUsage
from tui.widgets.base import LineWidget, strip


class TitleBar(LineWidget):
    """``neuron-top <version> running on <instance-id> (<instance-type>)`` plus source status."""

    COMPONENT_CLASSES = {"titlebar--status"}
    DEFAULT_CSS = """
    TitleBar { height: auto; background: $primary; color: $text; text-style: bold; }
    TitleBar > .titlebar--status { text-style: not bold; }
    """

    def __init__(self, version: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.version = version
        self.instance_id = "unknown instance"
        self.instance_type = ""
        self.status = ""

    def show(self, instance_id: str, instance_type: str, status: str) -> None:
        if (instance_id, instance_type, status) == (self.instance_id, self.instance_type, self.status):
            return  # unchanged: no repaint
        self.instance_id, self.instance_type, self.status = instance_id, instance_type, status
        self.invalidate(layout=True)

    def build_lines(self, width: int) -> list[Strip]:
        """One line when it fits; else "running on" goes, then the status takes a second line,
        wrapped at word boundaries (never cut mid-word)."""
        kind = f" ({self.instance_type})" if self.instance_type else ""
        status_style = self.style_of("titlebar--status")
        long = f" neuron-top {self.version} running on {self.instance_id}{kind}"
        short = f" neuron-top {self.version} · {self.instance_id}{kind}"
        shortest = f" neuron-top · {self.instance_id}{kind}"
        for title in (long, short, shortest):
            if len(title) + len(self.status) + 3 <= width:
                gap = " " * (width - len(title) - len(self.status) - 1)
                return [strip([(title, None), (gap, None), (self.status + " ", status_style)])]
        title = short if len(short) <= width else fit(short, width)
        lines = [strip([(title, None)])]
        for part in wrap_words(self.status, width - 2, 1) if self.status else ():
            lines.append(strip([(" " + part.rjust(width - 2) + " ", status_style)]))
        return lines


class Banner(LineWidget):
    """Faults and source trouble; hidden when there is nothing to say."""

    COMPONENT_CLASSES = {"banner--error", "banner--warning", "banner--stale"}
    DEFAULT_CSS = """
    Banner { height: auto; max-height: 3; display: none; }
    Banner.-visible { display: block; }
    Banner > .banner--error { background: $error; color: $text; text-style: bold; }
    Banner > .banner--warning { background: $warning; color: $background; }
    Banner > .banner--stale { background: $warning-darken-2; color: $text; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.faults: tuple[Fault, ...] = ()
        self.stale = ""

    def show(self, faults: tuple[Fault, ...], stale: str) -> None:
        if (faults, stale) == (self.faults, self.stale):
            return
        self.faults, self.stale = faults, stale
        self.set_class(bool(faults or stale), "-visible")
        self.invalidate(layout=True)

    def build_lines(self, width: int) -> list[Strip]:
        """At most three lines, each message wrapped at word boundaries."""
        messages = []
        if self.stale:
            messages.append((f"! {self.stale}", "banner--stale"))
        errors = [f.text for f in self.faults if f.severity == "error"]
        warnings = [f.text for f in self.faults if f.severity != "error"]
        if errors:
            messages.append(("FAULT: " + " · ".join(errors), "banner--error"))
        if warnings:
            messages.append(("WARNING: " + " · ".join(warnings), "banner--warning"))
        lines: list[Strip] = []
        for index, (message, style) in enumerate(messages):
            room = 3 - len(lines) - (len(messages) - index - 1)  # leave a line for each after
            for part in wrap_words(message, width - 2, max(1, room)):
                lines.append(strip([(fit(" " + part, width), self.style_of(style))]))
        return lines[:3]


def _pairs_to_lines(head: str, pairs: list[tuple[str, str]], width: int, indent: int,
                    head_style, label_style) -> list[Strip]:
    """Lay ``label value`` pairs after a heading, wrapping whole pairs to the next line."""
    lines, parts, used = [], [(head.ljust(indent), head_style)], indent
    for label, value in pairs:
        cell = (len(label) + 1 if label else 0) + len(value) + 3
        if used + cell > width and used > indent:
            lines.append(strip(parts))
            parts, used = [(" " * indent, None)], indent
        parts += [(label + " " if label else "", label_style),
                  (value.ljust(len(value) + 3), label_style if not label else None)]
        used += cell
    lines.append(strip(parts))
    return lines


class VcpuPanel(LineWidget):
    COMPONENT_CLASSES = {"panel--head", "panel--label"}
    DEFAULT_CSS = """
    VcpuPanel { height: auto; }
    VcpuPanel > .panel--head { text-style: bold; }
    VcpuPanel > .panel--label { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.usage: VcpuUsage | None = None

    def show(self, usage: VcpuUsage) -> None:
        if usage == self.usage:
            return
        self.usage = usage
        self.invalidate()

    def build_lines(self, width: int) -> list[Strip]:
        u = self.usage or VcpuUsage(None, None, None, None)
        head, label = self.style_of("panel--head"), self.style_of("panel--label")
        lines = []
        of_what = f"of {u.host_vcpus} vCPUs" if u.host_vcpus else "of the host"
        for name, user, system, note in (
                ("System vCPU Usage", u.system_user, u.system_system, ""),
                ("Runtime vCPU Usage", u.runtime_user, u.runtime_system,
                 of_what if u.runtime_user is not None else "")):
            pairs = [("user", percent(user)), ("system", percent(system))]
            if note:
                pairs.append(("", note))
            lines += _pairs_to_lines(name, pairs, width, 20, head, label)
        return lines


class MemorySummaryView(LineWidget):
    COMPONENT_CLASSES = {"panel--head", "panel--label"}
    DEFAULT_CSS = """
    MemorySummaryView { height: auto; }
    MemorySummaryView > .panel--head { text-style: bold; }
    MemorySummaryView > .panel--label { color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.summary: MemorySummary | None = None

    def show(self, summary: MemorySummary) -> None:
        if summary == self.summary:
            return
        self.summary = summary
        self.invalidate(layout=True)

    def build_lines(self, width: int) -> list[Strip]:
        s = self.summary
        head, label = self.style_of("panel--head"), self.style_of("panel--label")
        if s is None or not s.reported:
            missing = s.missing if s is not None else "no memory_used group in the recent reports"
            return [strip([(missing, label)])]
        host = [("Total", human_bytes(s.host_total))]
        host += [(name, human_bytes(s.host.get(key))) for key, name in HOST_CATEGORIES]
        device = [("Total", human_bytes(s.device_total))]
        device += [(name, human_bytes(s.device.get(key))) for key, name in DEVICE_CATEGORIES]
        full = (_pairs_to_lines("Host Used Memory", host, width, 20, head, label)
                + _pairs_to_lines("Device Used Memory", device, width, 20, head, label))
        # AWS's headings while they cost no line; narrower (80 columns) the short ones save a
        # line for the memory tree below (the section's title already says "Memory Usage")
        short = (_pairs_to_lines("Host", host, width, 8, head, label)
                 + _pairs_to_lines("Device", device, width, 8, head, label))
        return full if len(full) <= len(short) else short


# Tab names are shortened down to this many cells, no further: past that the bar shows the tabs
# around the selected one instead (then each name keeps up to READABLE_TAB cells)
MIN_TAB, READABLE_TAB = 4, 12


def shared_prefix(tags: list[str]) -> str:
    """The start every tag shares (two tags or more), leaving each at least one cell."""
    if len(tags) < 2:
        return ""
    prefix = os.path.commonprefix(tags)
    return prefix[:min(len(tag) for tag in tags) - 1]


def elide_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its middle replaced by ``…``: the start and the end
    (where a worker's number is) both stay, the end a cell longer."""
    if len(text) <= width:
        return text
    head = max(0, width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):] if width > 1 else "…"


def short_tab_names(tags: list[str], longest: int) -> list[str]:
    """Tags of at most ``longest`` cells. The start they all share goes first (``…13`` for
    worker-13, beside worker-12): shortening each evenly made every one of them "wor…"."""
    prefix = shared_prefix(tags)
    if len(prefix) < 2:   # an ellipsis in place of one cell saves nothing
        return [elide_middle(tag, longest) for tag in tags]
    return ["…" + elide_middle(tag[len(prefix):], longest - 1) for tag in tags]


class AppsBar(LineWidget):
    """AWS's "Neuron Apps" tab bar: ``>[1]:all<  [2]:<tag> …``; click a tab to select it. With
    more tabs than fit, it shows those around the selected one, between ``‹N`` and ``N›``
    (the number of tabs left out on each side: a click there steps to the next of them)."""

    COMPONENT_CLASSES = {"apps--selected", "apps--label"}
    DEFAULT_CSS = """
    AppsBar { height: 1; background: $panel; }
    AppsBar > .apps--selected { color: $success; text-style: bold reverse; }
    AppsBar > .apps--label { text-style: bold; }
    """

    class TabClicked(Message):
        def __init__(self, tab: str) -> None:
            super().__init__()
            self.tab = tab

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.tabs: tuple[str, ...] = ("all",)
        self.selected = "all"
        self.first = 0  # the first tab shown when they do not all fit; follows the selected
        self._spans: list[tuple[int, int, str]] = []

    def show(self, tabs: tuple[str, ...], selected: str) -> None:
        if (tabs, selected) != (self.tabs, self.selected):
            self.tabs, self.selected = tabs, selected
            self.invalidate()

    @staticmethod
    def _tab_width(name: str) -> int:
        return len(name) + 7   # " [k]:" name " " and a space after

    def _names(self, width: int) -> tuple[str, list[str]]:
        """The heading and the tab names, as they show: escaped (a tag's control characters
        take cells: measured raw, they were never shortened), then shortened evenly when the
        bar is too narrow (short_tab_names). "all" is never shortened."""
        names = [one_line(tab) for tab in self.tabs]
        for head in (" Neuron Apps: ", " Apps: "):
            if len(head) + sum(map(self._tab_width, names)) <= width:
                return head, names
        first, tags = names[:1], names[1:]
        for longest in range(max(map(len, tags)), MIN_TAB - 1, -1):
            short = first + short_tab_names(tags, longest)
            if len(head) + sum(map(self._tab_width, short)) <= width:
                return head, short
        return head, first + short_tab_names(tags, READABLE_TAB)

    def _window(self, head: str, names: list[str], width: int) -> tuple[int, int]:
        """The tabs shown, names[first:last]: all of them when they fit, else as many as fit
        around the selected one, which is always among them."""
        def fits(first: int, last: int) -> bool:
            left = len(f"‹{first} ") if first else 0
            right = len(f"{len(names) - last}›") if last < len(names) else 0
            return len(head) + left + sum(map(self._tab_width, names[first:last])) + right <= width
        chosen = self.tabs.index(self.selected) if self.selected in self.tabs else 0
        first = min(self.first, chosen, len(names) - 1)
        while first < chosen and not fits(first, chosen + 1):
            first += 1
        last = chosen + 1
        while last < len(names) and fits(first, last + 1):
            last += 1
        while first > 0 and fits(first - 1, last):   # room left at the end: fill it
            first -= 1
        self.first = first
        return first, last

    def build_lines(self, width: int) -> list[Strip]:
        head, names = self._names(width)
        first, last = self._window(head, names, width)
        label = self.style_of("apps--label")
        parts = [(head, label)]
        x, self._spans = len(head), []
        if first:
            text = f"‹{first}"
            parts += [(text, label), (" ", None)]
            self._spans.append((x, x + len(text), self.tabs[first - 1]))
            x += len(text) + 1
        for number in range(first, last):
            tab, name = self.tabs[number], names[number]
            key = str(number + 1) if number < 9 else "-"
            chosen = tab == self.selected
            text = f">[{key}]:{name}<" if chosen else f" [{key}]:{name} "
            parts += [(text, self.style_of("apps--selected") if chosen else None), (" ", None)]
            self._spans.append((x, x + len(text), tab))
            x += len(text) + 1
        if last < len(names):
            text = f"{len(names) - last}›"
            parts.append((text, label))
            self._spans.append((x, x + len(text), self.tabs[last]))
        return [strip(parts)]

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        for start, end, tab in self._spans:
            if start <= offset.x < end:
                self.post_message(self.TabClicked(tab))
