"""neuron-top performance: per-frame CPU at 160x50, idle CPU at 1 Hz, RSS.

Each figure is printed with its ratio against a baseline measured in the same run:
  frame  vs a 160x50 DataTable refreshed with 1,024 update_cell calls (perf-baselines.md §7);
  idle   vs a bare Textual app (Header/Static/Footer) in the same terminal;
  RSS    vs the same bare Textual app.
Frames and idle runs are real: the whole app on the headless driver (layout, render_line,
compositor) for frames; the installed console script in a tmux pane for idle CPU and RSS.
Median [min-max] of RUNS runs.
"""
from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from monitor.report import Report  # noqa: E402
from monitor.sources import ListSource  # noqa: E402
from tests.fixtures.demo_stream import generate  # noqa: E402
from tui.app import NeuronTopApp  # noqa: E402
from tui.messages import ReportArrived  # noqa: E402

RUNS = 5
FRAMES = 40
IDLE_SECONDS = 8.0

BARE_APP = '''
from textual.app import App
from textual.widgets import Footer, Header, Static
class Bare(App):
    def compose(self):
        yield Header(); yield Static("idle"); yield Footer()
Bare().run()
'''


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


async def neuron_top_frames(lines: list[bytes], parse: bool = True) -> float:
    """CPU ms per frame: (parse one trn2.48xlarge line,) post it, let the app lay out and render."""
    parsed = [Report.from_json(line) for line in lines]
    app = NeuronTopApp(ListSource([], hold_open=True), clock=time.time)
    async with app.run_test(size=(160, 50)) as pilot:
        for line in lines[:3]:  # warm-up: first layout, caches, history
            app.post_message(ReportArrived(Report.from_json(line), app.malformed, time.time()))
            await pilot.pause()
        start = time.process_time()
        for i in range(FRAMES):
            report = Report.from_json(lines[i % len(lines)]) if parse else parsed[i % len(parsed)]
            app.post_message(ReportArrived(report, app.malformed, time.time()))
            await pilot.pause()
        return (time.process_time() - start) * 1000 / FRAMES


async def datatable_frames() -> float:
    """The baseline: a 128x8 DataTable at 160x50, every cell updated, then refreshed."""
    from textual.app import App
    from textual.widgets import DataTable

    class Table(App):
        def compose(self):
            yield DataTable()

    app = Table()
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one(DataTable)
        keys = [table.add_column(f"c{c}", key=f"c{c}") for c in range(8)]
        rows = [table.add_row(*([0.0] * 8), key=f"r{r}") for r in range(128)]
        await pilot.pause()
        start = time.process_time()
        for frame in range(FRAMES // 4):
            for row in rows:
                for key in keys:
                    table.update_cell(row, key, round(frame * 0.37, 2))
            await pilot.pause()
        return (time.process_time() - start) * 1000 / (FRAMES // 4)


def in_tmux(command: str, seconds: float) -> tuple[float, float]:
    """(CPU % of one core, RSS MiB) of the process ``command`` starts in a 160x50 tmux pane."""
    session = f"bench-{os.getpid()}"
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]
    start = [*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "50",
             f"unset COLUMNS LINES; exec {command}"]
    if subprocess.run(start, capture_output=True).returncode != 0:  # a busy box: retry once
        time.sleep(1.0)
        subprocess.run(start, check=True, capture_output=True)
    try:
        pane_pid = int(subprocess.run([*tmux, "display", "-p", "-t", session, "#{pane_pid}"],
                                      capture_output=True, text=True, check=True).stdout)
        proc = psutil.Process(pane_pid)
        time.sleep(3.0)  # start-up and first reports are not idle
        before = proc.cpu_times()
        time.sleep(seconds)
        after = proc.cpu_times()
        cpu = (after.user + after.system - before.user - before.system) / seconds * 100
        return cpu, proc.memory_info().rss / 2**20
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def main() -> int:
    lines = generate(8, seed=7)
    print(f"neuron-top benchmark: trn2.48xlarge report ({len(lines[0]) / 1024:.0f} KiB JSON, "
          f"64 cores, 4 runtimes), 160x50, {RUNS} runs")
    ours = [asyncio.run(neuron_top_frames(lines)) for _ in range(RUNS)]
    ui_only = [asyncio.run(neuron_top_frames(lines, parse=False)) for _ in range(RUNS)]
    base = [asyncio.run(datatable_frames()) for _ in range(RUNS)]
    ratio = statistics.median(base) / statistics.median(ours)
    print(f"frame CPU (parse + history + views + layout + render), ms: {summary(ours)}  "
          f"(target <= 15)")
    print(f"  of which the UI (history + views + layout + render, Report already parsed), ms: "
          f"{summary(ui_only)}")
    print(f"baseline DataTable 128x8 update_cell frame, ms: {summary(base)}  -> {ratio:.1f}x faster")
    exe = shutil.which("neuron-top", path=str(pathlib.Path(sys.executable).parent))
    if shutil.which("tmux") is None or exe is None:
        print("idle CPU / RSS: skipped (needs tmux and the installed neuron-top script)")
        return 0
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as bare:
        bare.write(BARE_APP)
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as stream:
        stream.write(b"\n".join(generate(20, seed=7)) + b"\n")
    try:
        ours_idle = [in_tmux(f"{exe} --replay {stream.name} --loop", IDLE_SECONDS)
                     for _ in range(RUNS)]
        bare_idle = [in_tmux(f"{sys.executable} {bare.name}", IDLE_SECONDS) for _ in range(RUNS)]
    finally:
        os.unlink(bare.name)
        os.unlink(stream.name)
    cpu, rss = [c for c, _ in ours_idle], [r for _, r in ours_idle]
    bcpu, brss = [c for c, _ in bare_idle], [r for _, r in bare_idle]
    print(f"idle CPU at 1 Hz reports, % of a core: {summary(cpu)}  (target <= 3); "
          f"bare Textual app: {summary(bcpu)}  -> +{statistics.median(cpu) - statistics.median(bcpu):.2f} points")
    print(f"RSS, MiB: {summary(rss)}  (target <= 120); bare Textual app: {summary(brss)}  -> "
          f"{statistics.median(rss) / statistics.median(brss):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
