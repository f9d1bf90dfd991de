"""Every key neuron-top answers to, in one table: the bindings and the help screen derive from it."""
from __future__ import annotations

from textual.binding import Binding

# (keys, action, footer label or "" to keep it out of the footer, help text)
GLOBAL_KEYS: tuple[tuple[str, str, str, str], ...] = (
    ("q", "quit", "quit", "quit"),
    ("question_mark", "help", "help", "show this help"),
    ("space", "pause", "pause", "pause / resume the display (reports keep arriving)"),
    ("f", "toggle_flops", "FLOPS", "NeuronCore grid: utilization % <-> TFLOPs"),
    ("a", "tab(-1)", "prev app", "previous Neuron Apps tab"),
    ("d", "tab(1)", "next app", "next Neuron Apps tab"),
    ("x", "expand_all", "expand all", "memory tree: expand / collapse the entire tree"),
    ("o", "view('overview')", "overview", "overview: AWS neuron-top layout"),
    ("e", "view('engines')", "engines", "engines: per-engine detail, HBM, power of the selected core"),
    ("p", "view('processes')", "processes", "processes: table of runtimes"),
    ("left_square_bracket", "core(-1)", "", "engines: previous core"),
    ("right_square_bracket", "core(1)", "", "engines: next core"),
    ("s", "sort", "", "processes: sort by the next column"),
    ("r", "reverse", "", "processes: reverse the sort order"),
    ("slash", "filter", "", "processes: filter: pid:N, tag:TEXT or any text; commas for several "
     "(enter applies, esc clears)"),
    ("t", "process_tree", "", "processes: tree of the runtimes under their parent processes"),
    ("I", "signal('SIGINT')", "", "processes: send SIGINT to the selected runtime (asks first)"),
    ("T", "signal('SIGTERM')", "", "processes: send SIGTERM to the selected runtime (asks first)"),
    ("K", "signal('SIGKILL')", "", "processes: send SIGKILL to the selected runtime (asks first)"),
    ("c", "next_theme", "", "next colour theme"),
    ("S", "save_screenshot", "", "save a screenshot (SVG) in the working directory"),
) + tuple((str(n), f"tab_number({n})", "", f"select Neuron Apps tab {n}") for n in range(1, 10))

WIDGET_KEYS: tuple[tuple[str, str], ...] = (
    ("arrows", "move the tree selection / the selected core / the process row (focused section)"),
    ("enter", "expand / collapse the tree node; in processes: that runtime's detail screen "
              "(esc returns, o shows its app)"),
    ("ctrl+p", "command palette: views, apps, sort columns, pause, FLOPs, screenshot, theme"),
    ("tab / shift+tab", "move focus: memory tree, core grid, process table"),
    ("pgup / pgdn / home / end", "scroll the memory tree or the process table"),
    ("mouse", "click a core, a tab, a tree node or a column header; wheel scrolls"),
)

_DISPLAY = {"question_mark": "?", "space": "space", "left_square_bracket": "[",
            "right_square_bracket": "]", "slash": "/", "escape": "esc"}


# The footer, in priority order (what a narrow terminal keeps): quit, help and the views, then
# the current view's own keys, then the rest. ``?`` always stays: help lists every key.
# (keys shown, label, action run on click, views it applies to; None = every view)
FOOTER: tuple[tuple[str, str, str, frozenset | None], ...] = (
    ("q", "quit", "quit", None),
    ("?", "help", "help", None),
    ("o/e/p", "view", "cycle_view", None),
    ("f", "FLOPs", "toggle_flops", frozenset({"overview"})),
    ("x", "expand", "expand_all", frozenset({"overview"})),
    ("[ ]", "core", "core(1)", frozenset({"engines"})),
    ("enter", "details", "details", frozenset({"processes"})),
    ("s/r", "sort", "sort", frozenset({"processes"})),
    ("/", "filter", "filter", frozenset({"processes"})),
    ("I/T/K", "signal", "", frozenset({"processes"})),
    ("t", "tree", "process_tree", frozenset({"processes"})),
    ("space", "pause", "pause", None),
    ("a/d", "app", "tab(1)", None),
    ("^p", "cmds", "command_palette", None),
)


# The fleet screen's keys (neuron-top --prometheus): its bindings, its help and its footer.
# (key, action on the fleet screen, help text)
FLEET_KEYS: tuple[tuple[str, str, str], ...] = (
    ("s", "sort", "sort by the next column"),
    ("r", "reverse", "reverse the sort order"),
    ("slash", "filter", "filter by instance id, type, AZ, up/down or runtime tag "
     "(enter applies, esc clears)"),
    ("escape", "clear_filter", "clear the filter; on an instance's screens: back to the fleet"),
    ("q", "app.quit", "quit"),
)

FLEET_WIDGET_KEYS: tuple[tuple[str, str], ...] = (
    ("arrows / pgup / pgdn", "move the instance cursor (pgup / pgdn: ten rows)"),
    ("home / end", "the first / the last instance"),
    ("enter", "open the instance: the host screens (core grid, engines, memory, processes) "
              "built from Prometheus; esc returns to the fleet"),
    ("?", "show this help (on an instance's screens: their keys)"),
    ("c", "next colour theme"),
    ("S", "save a screenshot (SVG) in the working directory"),
    ("ctrl+p", "command palette: open, sort, reverse, filter, screenshot, theme"),
    ("mouse", "click a row to select it (twice: open it), a column header to sort by it "
              "(again: reverse), a footer key to run it"),
)

# The fleet footer, in the same priority order as the host views' (click: "screen.<action>").
FLEET_FOOTER: tuple[tuple[str, str, str], ...] = (
    ("q", "quit", "quit"),
    ("?", "help", "help"),
    ("enter", "open", "screen.open"),
    ("s/r", "sort", "screen.sort"),
    ("/", "filter", "screen.filter"),
    ("^p", "cmds", "command_palette"),
)


def footer_entries(view: str, readonly: bool = False) -> list[tuple[str, str, str]]:
    if view == "fleet":
        return list(FLEET_FOOTER)
    return [(keys, label, action) for keys, label, action, views in FOOTER
            if (views is None or view in views) and not (readonly and label == "signal")]


def display_key(key: str) -> str:
    return _DISPLAY.get(key, key)


def bindings() -> list[Binding]:
    return [Binding(key, action, label or help_text, show=bool(label),
                    key_display=_DISPLAY.get(key))
            for key, action, label, help_text in GLOBAL_KEYS]


def help_lines() -> list[tuple[str, str]]:
    """(key, description) pairs, digits folded into one ``1-9`` line."""
    lines = [(display_key(k), text) for k, _, _, text in GLOBAL_KEYS if not k.isdigit()]
    lines.append(("1-9", "select a Neuron Apps tab by number"))
    return lines + list(WIDGET_KEYS)


def fleet_bindings() -> list[Binding]:
    """The fleet screen's own keys (the footer shows them, not Textual's)."""
    return [Binding(key, action, help_text, show=False, key_display=_DISPLAY.get(key))
            for key, action, help_text in FLEET_KEYS]


def fleet_help_lines() -> list[tuple[str, str]]:
    """(key, description) pairs of the fleet screen's help."""
    return [(display_key(k), text) for k, _, text in FLEET_KEYS] + list(FLEET_WIDGET_KEYS)
