"""The per-process screen (Enter in the process table) and the signal confirmation dialog."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.markup import escape
from textual.screen import ModalScreen, Screen
from textual.strip import Strip
from textual.widgets import Static

from monitor.errors import one_line
from tui.braille import braille_rows
from tui.fmt import (core_ranges, count_text, human_bytes, per_second, percent, pid_text, tflops,
                     wrap_words)
from tui.procdetail import ProcessDetail
from tui.procs import ProcessRow
from tui.widgets.base import LineWidget, strip

LABEL = 12


class ProcessDetailView(LineWidget, can_focus=True):
    """Attributes down: ``detail`` (None once the process stopped reporting: the last one stays)."""

    COMPONENT_CLASSES = {"detail--head", "detail--section", "detail--graph", "detail--muted",
                         "detail--error"}
    DEFAULT_CSS = """
    ProcessDetailView { height: 1fr; }
    ProcessDetailView > .detail--head { text-style: bold; color: $text-accent; }
    ProcessDetailView > .detail--section { text-style: bold; background: $panel; }
    ProcessDetailView > .detail--graph { color: $accent; }
    ProcessDetailView > .detail--muted { color: $text-muted; }
    ProcessDetailView > .detail--error { color: $error; text-style: bold; }
    """

    BINDINGS = [Binding("up", "scroll(-1)", show=False), Binding("down", "scroll(1)", show=False),
                Binding("pageup", "scroll(-10)", show=False),
                Binding("pagedown", "scroll(10)", show=False),
                Binding("home", "scroll(-100000)", show=False),
                Binding("end", "scroll(100000)", show=False)]

    def __init__(self, pid: int | None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pid = pid
        self.detail: ProcessDetail | None = None
        self.gone = False

    def show(self, detail: ProcessDetail | None) -> None:
        if detail is None:
            self.gone = True
        else:
            self.detail, self.gone = detail, False
        self.invalidate(layout=True)

    def build_lines(self, width: int) -> list[Strip]:
        d = self.detail
        muted = self.style_of("detail--muted")
        if d is None:
            return [strip([(f"{pid_text(self.pid)}: waiting for its report…", muted)])]
        row = d.row
        cores = f"{count_text(len(row.cores), 'core')} ({core_ranges(row.cores)})"
        # stream text escaped before it is measured (strip() would escape it after)
        head = (f"{pid_text(row.pid)} · {one_line(row.tag)} · {cores} · "
                f"NC utilization {percent(row.utilization)} · "
                f"vCPU {vcpu_text(row, d.failed.get('neuron_runtime_vcpu_usage', ''))}")
        lines = [strip([(" " + part, self.style_of("detail--head"))])
                 for part in wrap_words(head, width - 1, 2)]
        if self.gone:
            lines.append(strip([(" stopped reporting; showing its last report", self.style_of(
                "detail--error"))]))
        elif row.status:
            lines.append(strip([(fit_line(f" status: {one_line(row.status)}", width),
                                 self.style_of("detail--error"))]))
        lines += self._history(d, width)
        lines += self._executions(d, width)
        lines += self._memory(d, width)
        lines += self._cores(d, width)  # the longest part last: it scrolls
        return lines

    def action_scroll(self, delta: int) -> None:
        total = len(self.lines_for(self.size.width))
        self.top_row = min(max(self.top_row + delta, 0), max(0, total - self.size.height))
        self.refresh()

    def on_mouse_scroll_down(self, event) -> None:
        self.action_scroll(1)

    def on_mouse_scroll_up(self, event) -> None:
        self.action_scroll(-1)

    def on_resize(self, event) -> None:
        self.action_scroll(0)

    def _section(self, title: str, width: int) -> Strip:
        return strip([(f" {title} ".ljust(width), self.style_of("detail--section"))])

    def _history(self, d: ProcessDetail, width: int) -> list[Strip]:
        cores = count_text(len(d.row.cores), "core")
        lines = [self._section(f"Utilization history, mean over its {cores} (newest right)",
                               width)]
        graph_w = max(4, width - LABEL - 9)
        for index, (label, series) in enumerate(d.history):
            height = 2 if index == 0 else 1
            now = float(series[-1]) if series.size and series[-1] == series[-1] else None
            for i, row in enumerate(braille_rows(series, graph_w, height, top=1.0)):
                head = f"{label:<{LABEL}}{percent(now):>8} " if i == 0 else " " * (LABEL + 9)
                lines.append(strip([(head, None), (row, self.style_of("detail--graph"))]))
        return lines

    def _failed(self, d: ProcessDetail, group: str, width: int) -> list[Strip]:
        """The group's error, where its figures would be (none when it did not fail)."""
        error = d.failed.get(group)
        if not error:
            return []
        return [strip([("  " + part, self.style_of("detail--error"))])
                for part in wrap_words(f"{group} failed: {error}", width - 2, 2)]

    def _missing(self, group: str) -> Strip:
        return strip([(f"  no {group} for this runtime", self.style_of("detail--muted"))])

    def _cores(self, d: ProcessDetail, width: int) -> list[Strip]:
        lines = [self._section("Cores", width)]
        cells = [f"NC{core:<3} {percent(util):>7} {tflops(flops):>9}" for core, util, flops in d.cores]
        if not cells:
            return lines + (self._failed(d, "neuroncore_counters", width)
                            or [self._missing("neuroncore_counters")])
        per_line = max(1, width // 26)
        for start in range(0, len(cells), per_line):
            lines.append(strip([("  " + "   ".join(cells[start:start + per_line]), None)]))
        return lines

    def _memory(self, d: ProcessDetail, width: int) -> list[Strip]:
        lines = [self._section("Memory", width)]
        if d.row.device_bytes is None:   # the group failed, or the stream lacks it
            return lines + (self._failed(d, "memory_used", width) or [self._missing("memory_used")])
        # The totals are the runtime's reported ones (the table's): the per-core categories
        # need not add up to them (a runtime holds memory outside its cores' breakdown).
        for name, total, parts in (("Device", d.row.device_bytes, d.device_memory),
                                   ("Host", d.row.host_bytes, d.host_memory)):
            text = f"{name:<8}Total {human_bytes(total)}" + "".join(
                f" · {label} {human_bytes(value)}" for label, value in parts)
            lines += [strip([("  " + part, None)]) for part in wrap_words(text, width - 2, 2)]
        if d.models is None:
            lines.append(strip([("  loaded models: not in this stream",
                                 self.style_of("detail--muted"))]))
        for name, model_id, size in d.models or ():
            lines.append(strip([(fit_line(f"  model {name} (id {model_id}): {human_bytes(size)} "
                                          "on the device", width), self.style_of("detail--muted"))]))
        return lines

    def _executions(self, d: ProcessDetail, width: int) -> list[Strip]:
        period = d.period if d.period > 0 else 1.0
        lines = [self._section(f"Executions in the last {period:.1f}s", width)]
        if d.row.executions_per_second is None:   # no counts to read: no "errors: none" either
            return lines + (self._failed(d, "execution_stats", width)
                            or [self._missing("execution_stats")])
        total = sum(v for _, v in d.statuses)
        text = f"{per_second(total / period)} · " + " · ".join(
            f"{name} {count}" for name, count in d.statuses)
        lines += [strip([("  " + part, None)]) for part in wrap_words(text, width - 2, 2)]
        if d.latency:
            lines.append(strip([("  latency " + " · ".join(
                f"{name} {value * 1000:.2f}ms" for name, value in d.latency), None)]))
        errors = [(kind, count) for kind, count in d.errors if count]
        style = self.style_of("detail--error") if errors else self.style_of("detail--muted")
        text = ("errors: " + " · ".join(f"{kind} {count}" for kind, count in errors)) if errors \
            else "errors: none in the period"
        lines.append(strip([("  " + text, style)]))
        return lines


def vcpu_text(row: ProcessRow, error: str = "") -> str:
    """The stream's share of the host, and top's share of one vCPU where the count is known;
    ``error``: why the runtime's vCPU group has no reading."""
    if row.vcpu_host is None:
        return f"N/A (failed: {error})" if error else "N/A"
    host = f"{percent(row.vcpu_host)} of the host"
    return host if row.vcpu is None else f"{host} ({percent(row.vcpu, 1)} of one)"


def fit_line(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ProcessScreen(Screen[None]):
    """One runtime: its cores, engine history, memory, executions and errors. Esc returns."""

    DEFAULT_CSS = """
    ProcessScreen { layout: vertical; }
    ProcessScreen > #detail { border: round $accent; border-title-style: bold; padding: 0 1; }
    ProcessScreen > #detail-keys { height: 1; background: $panel; }
    """
    BINDINGS = [Binding("escape", "close", "back"),
                Binding("o", "show_app", "show this app in the overview")]

    def __init__(self, pid: int | None, tag: str, readonly: bool) -> None:
        super().__init__()
        self.pid, self.tag, self.readonly = pid, tag, readonly

    def compose(self) -> ComposeResult:
        view = ProcessDetailView(self.pid, id="detail")
        # a tag is data, never markup
        view.border_title = escape(f"Process {self.pid or '(pid unknown)'} ({one_line(self.tag)})")
        yield view
        keys = " esc back  o its app  arrows scroll  " + (
            "" if self.readonly else "I/T/K SIGINT/TERM/KILL  ") + "q quit"
        yield Static(keys, id="detail-keys")

    def on_mount(self) -> None:
        self.query_one(ProcessDetailView).focus()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_show_app(self) -> None:
        self.dismiss(None)
        self.app.show_app(self.tag)


class ConfirmSignal(ModalScreen[bool]):
    """``Send SIGTERM to pid N (tag)?``: y sends, n or esc does not."""

    DEFAULT_CSS = """
    ConfirmSignal { align: center middle; }
    ConfirmSignal > Vertical { width: 64; max-width: 100%; height: auto; border: thick $error;
                               background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question", markup=False)   # it names a tag: data
            yield Static("y: send   n / esc: cancel", id="answers")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
