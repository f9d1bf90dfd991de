"""The capture's typed seams: CaptureOptions and the ScriptTask a child process gets as JSON, the
profiler's usage error, and the registry's capture steps."""
from __future__ import annotations

import dataclasses

import pytest

from device_model import instance
from device_model.errors import SpecError
from device_model.workloads import REGISTRY, Placement
from device_model.workloads.spec import bind, split_spec
from profiler.capture.options import CaptureOptions, ScriptTask
from profiler.capture.script_launch import parse_command
from profiler.cli import main
from profiler.errors import ProfilerUsageError


def test_options_are_frozen_and_slotted():
    opts = CaptureOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.recorder = "python"
    assert not hasattr(opts, "__dict__")


def test_a_task_survives_json_with_its_types():
    task = ScriptTask(options=CaptureOptions(session_file="o.nsprof", auto_cast="all", detail_steps=0,
                                             progress="off", dp=4, recorder="python", steps=(3, None)),
                      kind="module", target="pkg.train", command="python -m pkg.train", instance="trn1.2xlarge",
                      lnc=1, parts="/somewhere")
    back = ScriptTask.from_json(task.to_json())
    assert back == task and back.options.steps == (3, None)


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", "JSON object"),
    ('{"colour": 1}', "'colour'"),
    ('{"options": {"speed": 1}}', "'speed'"),
    ('{"options": {"steps": [1]}}', "'steps'"),
    ('{"options": 3}', "'options'"),
    ("not json", None),
])
def test_a_malformed_task_is_a_value_error_naming_the_field(text, words):
    with pytest.raises(ValueError, match=words):
        ScriptTask.from_json(text)


def test_usage_errors_are_the_profilers_own_and_the_cli_prints_one_line(tmp_path, capsys):
    with pytest.raises(ProfilerUsageError, match="not found"):
        parse_command(["python", str(tmp_path / "missing.py")])
    assert issubclass(ProfilerUsageError, SpecError)
    assert main(["capture", "-s", str(tmp_path / "o.nsprof"), "--", "python", "-X"]) == 2
    err = capsys.readouterr().err
    assert err == "neuron-profile: error: unsupported python option '-X'; expected `python SCRIPT [ARGS]`\n"


def test_every_registered_workload_has_a_capture_step():
    inst = instance("trn2.48xlarge")
    for spec in ("mlp", "matmul:m=256,k=256,n=256", "allreduce:bytes=1M,ranks=4", "bert-base"):
        name, raw = split_spec(spec)
        capture = REGISTRY[name].capture
        step = capture.build(inst, bind(name, raw, capture.params), Placement())
        assert step.description and (step.stages or step.programs)
        assert capture.single_rank == (not step.stages)
    assert all(w.capture is not None for w in REGISTRY.values())
