"""Per-engine detail for the selected core, HBM bandwidth and modelled power for its device."""
from __future__ import annotations

import numpy as np
from textual import events
from textual.strip import Strip

from monitor.report import CoreEngineCounters, DeviceCounter, Report
from monitor.vocab import ENGINE_LABELS
from tui.braille import bar, braille_rows
from tui.fmt import human_rate, percent, pid_text, tflops, wrap_words
from tui.history import ENGINES, History
from tui.view import core_layout
from tui.widgets.base import LineWidget, strip

LABEL, BAR, VALUE = 11, 16, 11
# Rows left over after one per graph go to these first: the figures most looked at.
ROW_PRIORITY = ("NeuronCore", "Tensor", "HBM read", "HBM write", "Vector", "DMA", "Power", "Scalar",
                "GpSimd", "Temp", "Throttle")


class EngineView(LineWidget):
    """Attributes down: ``report``, ``history``, ``core``; draws bars and braille history."""

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
        self.core = 0
        self._heights: dict[str, int] = {}

    def show(self, report: Report, history: History, core: int) -> None:
        self.report, self.history, self.core = report, history, core
        self.invalidate()

    def on_resize(self, event: events.Resize) -> None:
        self.invalidate()

    def build_lines(self, width: int) -> list[Strip]:
        report, history = self.report, self.history
        if report is None or history is None:
            return [strip([("waiting for the first report…", self.style_of("engines--muted"))])]
        per_device = core_layout(report)[1]
        device = self.core // per_device
        heading = self._heading(report, width)
        engines = self._core_engines(report)
        counter = self._device_counter(report, device)
        labels = ([ENGINE_LABELS[e] for e in ENGINES] if engines else []) + ["NeuronCore",
                                                                            "HBM read", "HBM write"]
        labels += ["Power", "Temp", "Throttle"] if counter else []
        notes = (0 if engines else 1) + (0 if counter else 1)
        self._heights = self._row_heights(labels, self.size.height - len(heading) - 3 - notes)
        graph_w = max(4, width - LABEL - BAR - VALUE - 2)
        lines = heading
        lines += self._engine_lines(report, history, graph_w)
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

    def _heading(self, report: Report, width: int) -> list[Strip]:
        owner, util, flops = "no runtime", None, None
        for runtime in report.runtimes:
            counters = runtime.neuroncore_counters
            if counters and self.core in counters.cores:
                owner = f"{runtime.tag} ({pid_text(runtime.known_pid)})"
                util, flops = counters.cores[self.core].utilization, counters.cores[self.core].flops
        per_device = core_layout(report)[1]
        text = (f"NC{self.core} on ND{self.core // per_device} · {owner} · utilization "
                f"{percent(util)} · {tflops(flops)} · another core: [ ] or a click on the grid")
        return [strip([(" " + part, self.style_of("engines--head"))])
                for part in wrap_words(text, width - 1, 2)]

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

    def _core_engines(self, report: Report) -> CoreEngineCounters | None:
        for runtime in report.runtimes:
            group = runtime.engine_counters
            if group and self.core in group.cores:
                return group.cores[self.core]
        return None

    def _engine_lines(self, report, history, graph_w) -> list[Strip]:
        counters = self._core_engines(report)
        width = LABEL + BAR + VALUE + graph_w + 1
        lines = [self._section("Engines (utilization over the period; history right, newest last)",
                               width)]
        if counters is None:
            lines.append(strip([("  no neuroncore_engine_counters for this core in the stream "
                                 "(a neuronscope extension group)", self.style_of("engines--muted"))]))
        for index, engine in enumerate(ENGINES if counters else ()):
            ratio = counters.engine_utilization.get(engine)
            lines += self._series(ENGINE_LABELS[engine], ratio, percent(ratio),
                                  history.engine_series(self.core, index), 1.0, graph_w)
        core_series = history.core_series(self.core)
        now = float(core_series[-1]) if core_series.size else None
        lines += self._series("NeuronCore", now, percent(now), core_series, 1.0, graph_w)
        return lines

    def _device_counter(self, report: Report, device: int) -> DeviceCounter | None:
        group = report.system.device_counters
        return next((d for d in group.devices if d.index == device), None) if group else None

    def _hbm_lines(self, report, history, device, graph_w, width) -> list[Strip]:
        read = history.device_series(device, "hbm_read")
        write = history.device_series(device, "hbm_write")
        top = float(np.nanmax(np.concatenate((read, write)))) if np.isfinite(
            np.concatenate((read, write, [np.nan]))).any() else 1.0
        counter = self._device_counter(report, device)
        util = counter.hbm_bandwidth_utilization if counter else None
        lines = [self._section(f"ND{device} HBM bandwidth (scale: {human_rate(top)} full; "
                               f"utilization {percent(util)})", width)]
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
            lines.append(strip([("  no neuron_device_counters in the stream (a neuronscope "
                                 "extension group)", self.style_of("engines--muted"))]))
            return lines
        specs = (("Power", "power", 600.0, f"{counter.power_watts:.1f} W"),
                 ("Temp", "temperature", 110.0, f"{counter.temperature_celsius:.1f} °C"),
                 ("Throttle", "throttle", 1.0, percent(counter.throttle_ratio, 1)))
        for label, name, top, value in specs:
            series = history.device_series(device, name)
            now = float(series[-1]) if series.size and np.isfinite(series[-1]) else 0.0
            lines += self._series(label, now / top, value, series, top, graph_w)
        return lines
