"""Per-engine detail for the selected core, HBM bandwidth and modelled power for its device."""
from __future__ import annotations

import numpy as np
from textual import events
from textual.strip import Strip

from monitor.report import DeviceCounter, Report, RuntimeReport
from monitor.vocab import ENGINE_LABELS
from tui.braille import bar, braille_rows
from tui.fmt import human_rate, percent, pid_text, tflops, wrap_words
from tui.history import ENGINES, History, RuntimeKey, runtime_key
from tui.view import CoreShare, core_layout, core_share
from tui.widgets.base import LineWidget, strip

LABEL, BAR, VALUE = 11, 16, 11
# Rows left over after one per graph go to these first: the figures most looked at.
ROW_PRIORITY = ("NeuronCore", "Tensor", "HBM read", "HBM write", "Vector", "DMA", "Power", "Scalar",
                "GpSimd", "Temp", "Throttle")


class EngineView(LineWidget):
    """Attributes down: ``report``, ``history``, ``core`` and ``runtimes`` (an app tab's
    runtimes, whose own share of the core is shown; None on the ``all`` tab: every runtime's
    share added up); draws bars and braille history."""

    COMPONENT_CLASSES = {"engines--head", "engines--section", "engines--graph", "engines--bar",
                         "engines--muted", "engines--read", "engines--write"}
    DEFAULT_CSS = """
    EngineView { height: 1fr; }
    EngineView > .engines--head { text-style: bold; color: $text-accent; }
    EngineView > .engines--section { text-style: bold; color: $text; background: $panel; }
    EngineView > .engines--graph { color: $accent; }
    EngineView > .engines--bar { color: $success; }
    EngineView > .engines--muted { color: $text-muted; }
    EngineView > .engines--read { color: $success; }
    EngineView > .engines--write { color: $warning; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.report: Report | None = None
        self.history: History | None = None
        self.waiting = "waiting for the first report"   # the app says when none will come
        self.core = 0
        self.runtimes: tuple[RuntimeReport, ...] | None = None
        self._heights: dict[str, int] = {}

    def show(self, report: Report, history: History, core: int,
             runtimes: tuple[RuntimeReport, ...] | None = None) -> None:
        self.report, self.history, self.core, self.runtimes = report, history, core, runtimes
        self.invalidate()

    def _share(self, report: Report) -> CoreShare:
        return core_share(report.runtimes if self.runtimes is None else self.runtimes, self.core)

    def _keys(self) -> list[RuntimeKey] | None:
        """Whose history to draw: None, the host-wide one (the ``all`` tab)."""
        return None if self.runtimes is None else [runtime_key(r) for r in self.runtimes]

    def on_resize(self, event: events.Resize) -> None:
        self.invalidate()

    def build_lines(self, width: int) -> list[Strip]:
        report, history = self.report, self.history
        if report is None or history is None:
            return [strip([(f"{self.waiting}…", self.style_of("engines--muted"))])]
        per_device = core_layout(report)[1]
        device = self.core // per_device
        share = self._share(report)
        heading = self._heading(share, per_device, width)
        engines = share.engines
        counter = self._device_counter(report, device)
        labels = [ENGINE_LABELS[e] for e in ENGINES] if engines is not None else []
        labels += ["NeuronCore", "HBM read", "HBM write"]
        labels += ["Power", "Temp", "Throttle"] if counter else []
        notes = (0 if engines is not None else 1) + (0 if counter else 1)
        self._heights = self._row_heights(labels, self.size.height - len(heading) - 3 - notes)
        graph_w = max(4, width - LABEL - BAR - VALUE - 2)
        lines = heading
        lines += self._engine_lines(share, history, graph_w)
        lines += self._hbm_lines(report, history, device, graph_w, width)
        lines += self._power_lines(report, history, device, graph_w, width)
        return lines

    @staticmethod
    def _row_heights(labels: list[str], rows: int) -> dict[str, int]:
        """Share ``rows`` among the graphs: each gets the same, the rest go by ROW_PRIORITY, so
        the view fills the terminal instead of leaving blank rows under one-row graphs."""
        base, extra = divmod(max(rows, len(labels)), len(labels))
        heights = dict.fromkeys(labels, base)
        for label in [name for name in ROW_PRIORITY if name in heights][:extra]:
            heights[label] += 1
        return heights

    def _heading(self, share: CoreShare, per_device: int, width: int) -> list[Strip]:
        # several owners only on the all tab: their shares are added up, as in the grid
        owner = " + ".join(f"{r.tag} ({pid_text(r.known_pid)})" for r in share.owners)
        text = (f"NC{self.core} on ND{self.core // per_device} · {owner or 'no runtime'} · "
                f"utilization {percent(share.utilization)} · {tflops(share.flops)} · "
                "another core: [ ] or a click on the grid")
        return [strip([(" " + part, self.style_of("engines--head"))])
                for part in wrap_words(text, width - 1, 2)]

    def _muted(self, text: str, width: int) -> list[Strip]:
        """A note wrapped at words under a section (at 80 columns it was cut mid-word)."""
        return [strip([("  " + part, self.style_of("engines--muted"))])
                for part in wrap_words(text, max(10, width - 2), 2)]

    def _section(self, title: str, width: int) -> Strip:
        return strip([(f" {title} ".ljust(width), self.style_of("engines--section"))])

    def _series(self, label: str, ratio: float | None, value: str, series: np.ndarray,
                top: float, graph_w: int, graph_style: str = "engines--graph") -> list[Strip]:
        rows = braille_rows(series, graph_w, self._heights.get(label, 1), top=top)
        meter = bar(ratio, BAR - 1) if ratio is not None else " " * (BAR - 1)
        lines = []
        for i, row in enumerate(rows):
            head = [(label.ljust(LABEL), None), (meter + " ", self.style_of("engines--bar")),
                    (value.rjust(VALUE - 1) + " ", None)] if i == 0 else [(" " * (LABEL + BAR + VALUE), None)]
            lines.append(strip(head + [(" " + row, self.style_of(graph_style))]))
        return lines

    def _engine_lines(self, share: CoreShare, history: History, graph_w: int) -> list[Strip]:
        engines, keys = share.engines, self._keys()
        width = LABEL + BAR + VALUE + graph_w + 1
        lines = [self._section("Engines (utilization over the period; history right, newest last)",
                               width)]
        if engines is None:
            lines += self._muted("no neuroncore_engine_counters for this core in the stream "
                                 "(a neuronscope extension group)", width)
        for index, engine in enumerate(ENGINES if engines is not None else ()):
            ratio = engines.get(engine)
            lines += self._series(ENGINE_LABELS[engine], ratio, percent(ratio),
                                  history.engine_series(self.core, index, keys), 1.0, graph_w)
        core_series = history.core_series(self.core, keys)
        now = float(core_series[-1]) if core_series.size and np.isfinite(core_series[-1]) else None
        lines += self._series("NeuronCore", now, percent(now), core_series, 1.0, graph_w)
        return lines

    def _device_counter(self, report: Report, device: int) -> DeviceCounter | None:
        group = report.system.device_counters
        return next((d for d in group.devices if d.index == device), None) if group else None

    def _hbm_lines(self, report, history, device, graph_w, width) -> list[Strip]:
        read = history.device_series(device, "hbm_read")
        write = history.device_series(device, "hbm_write")
        known = np.isfinite(np.concatenate((read, write, [np.nan]))).any()
        top = float(np.nanmax(np.concatenate((read, write)))) if known else 1.0
        counter = self._device_counter(report, device)
        util = counter.hbm_bandwidth_utilization if counter else None
        scale = f"scale: {human_rate(top)} full" if known else "no reading yet"   # no made-up scale
        lines = [self._section(f"ND{device} HBM bandwidth ({scale}; utilization {percent(util)})",
                               width)]
        for label, series, style in (("HBM read", read, "engines--read"),
                                     ("HBM write", write, "engines--write")):
            now = float(series[-1]) if series.size and np.isfinite(series[-1]) else None
            ratio = now / top if now is not None and top > 0 else None
            lines += self._series(label, ratio, human_rate(now), series, max(top, 1.0), graph_w,
                                  style)
        return lines

    def _power_lines(self, report, history, device, graph_w, width) -> list[Strip]:
        counter = self._device_counter(report, device)
        note = "modelled" if counter is None or counter.modelled else "measured"
        lines = [self._section(f"ND{device} power / thermal / throttle ({note})", width)]
        if counter is None:
            return lines + self._muted("no neuron_device_counters in the stream (a neuronscope "
                                       "extension group)", width)
        specs = (("Power", "power", 600.0, f"{counter.power_watts:.1f} W"),
                 ("Temp", "temperature", 110.0, f"{counter.temperature_celsius:.1f} °C"),
                 ("Throttle", "throttle", 1.0, percent(counter.throttle_ratio, 1)))
        for label, name, top, value in specs:
            series = history.device_series(device, name)
            now = float(series[-1]) if series.size and np.isfinite(series[-1]) else 0.0
            lines += self._series(label, now / top, value, series, top, graph_w)
        return lines
