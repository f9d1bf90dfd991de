"""What a simulated runtime's training step runs, against `neuron-sim estimate` for the same
workload and placement (docs/runtime.md)."""
from __future__ import annotations

import pytest

from device_model import instance
from device_model.runtime.apps import build_app_program
from device_model.workloads import Placement, estimate
from device_model.workloads.cost import measure


def test_a_runtimes_training_step_is_the_estimate_without_dp_overlap():
    """The runtime runs a step's executions one after another, the data-parallel
    synchronisation after the last micro-batch: its step is `estimate`'s with dp_overlap=off
    (the default estimate hides most of the synchronisation under the backward pass)."""
    inst = instance("trn2.48xlarge")
    spec = "llama3-8b:mode=train,seq=1024"
    app = build_app_program(spec, inst, 48)
    assert [name for name, _, _ in app.executions] == ["microbatch", "optimizer"]
    step = sum(count * (measure(inst, program).time + inst.costs.exec_overhead_s)
               for _, program, count in app.executions)
    serial = estimate(spec + ",dp_overlap=off", inst, Placement(cores=48, tp=4))
    assert serial["parallel"]["tp"] == 4 and serial["parallel"]["dp"] == 12
    assert step == pytest.approx(serial["step_time_s"], rel=0.005)
    overlapped = estimate(spec, inst, Placement(cores=48, tp=4))["step_time_s"]
    assert step > 1.2 * overlapped                  # what docs/runtime.md says of the two
