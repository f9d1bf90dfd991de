"""What a script capture was asked for, and the task a capture hands to the processes it starts.

Both are frozen dataclasses; a task crosses into a child process as JSON (`to_json`/`from_json`),
never as a pickle, and a malformed one is a ValueError naming the field. The standard
library's json, not orjson: the child may run in the script's own interpreter, which has only
what the script needs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import json

# the recorders `--recorder` and $NEURONSCOPE_RECORDER choose between (recorders.py starts them)
RECORDER_KINDS = ("auto", "native", "python")

DEFAULT_SESSION = "profile.nsprof"


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    """A script capture's options (`neuron-profile capture ... -- python SCRIPT`)."""
    session_file: str = DEFAULT_SESSION     # the profile to write
    auto_cast: str = "matmult"              # none | matmult | all
    detail_steps: int = 4                   # steps kept at instruction level (the last N; 0 = all)
    progress: str = "auto"                  # auto | on | off
    dp: int | None = None                   # data-parallel degree of a single-process script
    recorder: str = "auto"                  # auto | native | python
    steps: tuple[int, int | None] | None = None     # recorded window of steps, counted from 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CaptureOptions":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"capture options: unknown field {unknown[0]!r}")
        values = dict(data)
        steps = values.get("steps")
        if steps is not None:
            if not isinstance(steps, (list, tuple)) or len(steps) != 2:
                raise ValueError("capture options: field 'steps' must be [first, last]")
            values["steps"] = (steps[0], steps[1])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class ScriptTask:
    """What a child process (the script's, or a torchrun worker) records and where it goes."""
    options: CaptureOptions = field(default_factory=CaptureOptions)
    kind: str = "path"                      # "path" (a script file) or "module" (`-m`)
    target: str = ""
    command: str = ""                       # the command as given, for the profile's metadata
    instance: str = ""                      # instance type the steps are simulated on
    lnc: int | None = None
    parts: str = ""                         # torchrun: folder the workers write their parts to

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["options"] = self.options.to_dict()
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "ScriptTask":
        data = json.loads(text)            # a JSONDecodeError is a ValueError
        if not isinstance(data, dict):
            raise ValueError("capture task: expected a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"capture task: unknown field {unknown[0]!r}")
        options = data.pop("options", {})
        if not isinstance(options, dict):
            raise ValueError("capture task: field 'options' must be an object")
        return cls(options=CaptureOptions.from_dict(options), **data)
