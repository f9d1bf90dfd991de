"""neuron-ls: golden files for every layout, and the CLI over real runtime processes.

Regenerate the golden files after a deliberate layout change with
``NEURONSCOPE_UPDATE_GOLDEN=1 pytest tests/test_neuron_ls.py``, then review the diff."""
from __future__ import annotations

import os
import pathlib
import subprocess

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector_sim import console_script, start_instance, stop_instance
from device_model.runtime import shm
from device_model.catalog.specs import get_instance
from monitor.ls_cli import NO_DEVICE_MESSAGE
from monitor.ls_render import (
    COMMAND_WIDTH, LsProcess, build_view, render_json, render_table, render_topology,
)

GOLDEN = pathlib.Path(__file__).parent / "fixtures" / "neuron_ls"
UPDATE = os.environ.get("NEURONSCOPE_UPDATE_GOLDEN") == "1"
INSTANCE_ID = "i-0123456789abcdef0"
TRAIN = LsProcess(113985, "neuron-bench exec --run-as-cc-neff --iterations 10", "2.0.0")
SERVE = LsProcess(114002, "python serve.py --port 8080", "2.0.0")
SELF = LsProcess(11240, "neuron-ls --show-all-procs", "NA")


def view(name="trn2.48xlarge", lnc=2, procs=None, type_=None):
    return build_view(get_instance(name), lnc, INSTANCE_ID, procs, instance_type=type_)


def trn2_with_processes():
    procs = {d: [SELF] for d in range(16)}
    for d in range(12):
        procs[d].append(TRAIN)
    for d in range(11, 16):
        procs[d].append(SERVE)
    return view(procs=procs, type_="trn2n.48xlarge")


CASES = {
    "trn2_default.txt": lambda: render_table(view(type_="trn2n.48xlarge")),
    "trn2_lnc1_default.txt": lambda: render_table(view(lnc=1)),
    "trn2_wide.txt": lambda: render_table(trn2_with_processes(), wide=True),
    "trn2_show_all.txt": lambda: render_table(trn2_with_processes(), show_all=True),
    "trn2_topology.txt": lambda: render_topology(view()),
    "trn2.json": lambda: render_json(trn2_with_processes()).decode(),
    "trn2_show_all.json": lambda: render_json(trn2_with_processes(), show_all=True).decode(),
    "trn1_32xlarge_default.txt": lambda: render_table(view("trn1.32xlarge", 1)),
    "trn1_2xlarge_wide.txt": lambda: render_table(view("trn1.2xlarge", 1, {0: [TRAIN]}),
                                                   wide=True),
    "trn1_2xlarge_topology.txt": lambda: render_topology(view("trn1.2xlarge", 1)),
    "ultraserver_default.txt": lambda: render_table(view("trn2u-ultraserver")),
    "ultraserver_topology.txt": lambda: render_topology(view("trn2u-ultraserver")),
    "trn3_topology.txt": lambda: render_topology(view("trn3-ultraserver")),
}


# AWS's own examples (neuron-ls.rst, Trn2 section), kept as they print: the same devices and
# processes must give the same bytes.
AWS_BENCH = LsProcess(268911, "neuron-bench exec --run-as-cc-neff --warmup none --fixed-instance-"
                      "count 64 --iterations 100 --report-json model.neff", "2.0.0")
AWS_SELF = LsProcess(269192, "neuron-ls --show-all-procs", "NA")


def aws_view(*procs: LsProcess):
    return build_view(get_instance("trn2.48xlarge"), 2, "i-aabbccdd123456789",
                      {d: list(procs) for d in range(16)}, instance_type="trn2n.48xlarge")


AWS_EXAMPLES = {
    "aws_trn2_default.txt": lambda: render_table(aws_view()),
    "aws_trn2_wide.txt": lambda: render_table(aws_view(AWS_BENCH), wide=True),
    "aws_trn2_show_all.txt": lambda: render_table(aws_view(AWS_BENCH, AWS_SELF), show_all=True),
    "aws_trn2_topology.txt": lambda: render_table(aws_view(), topology=True) + "\n\n"
    + render_topology(aws_view()),
}


@pytest.mark.parametrize("name", sorted(AWS_EXAMPLES))
def test_output_is_byte_for_byte_aws_example(name):
    assert AWS_EXAMPLES[name]() == (GOLDEN / name).read_text(encoding="utf-8")


def test_json_cuts_commands_as_aws_example_does():
    (first, *_) = orjson.loads(render_json(aws_view(AWS_BENCH)))
    assert first["neuron_processes"] == [{"pid": 268911, "neuron_runtime_version": "2.0.0",
                                          "command": "neuron-bench exec --run-as-cc-neff --..."}]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = CASES[name]()
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_default_table_matches_the_aws_example_row():
    lines = render_table(view(type_="trn2n.48xlarge")).splitlines()
    assert lines[:3] == ["instance-type: trn2n.48xlarge", f"instance-id: {INSTANCE_ID}",
                         "logical-neuroncore-config: 2"]
    cells = [c.strip() for c in lines[7].strip("|").split("|")]
    assert cells == ["0", "4", "0-3", "96 GB", "12, 3, 4, 1", "0000:cc:00.0", "48-95,144-191", "1"]
    assert [c.strip() for c in lines[4].strip("|").split("|")] == [
        "NEURON", "NEURON", "NEURON", "NEURON", "CONNECTED", "PCI", "CPU", "NUMA"]
    assert [c.strip() for c in lines[5].strip("|").split("|")] == [
        "DEVICE", "CORES", "CORE IDS", "MEMORY", "DEVICES", "BDF", "AFFINITY", "NODE"]


def test_trn1_has_no_lnc_line():
    assert "logical-neuroncore-config" not in render_table(view("trn1.32xlarge", 1))
    # nor the key in -j (it had 1, where the table and neuron-monitor leave the LNC out)
    assert all("logical_neuroncore_config" not in device
               for device in orjson.loads(render_json(view("trn1.32xlarge", 1))))


def test_json_fields_and_types():
    (first, *_) = orjson.loads(render_json(trn2_with_processes()))
    assert first == {"neuron_device": 0, "bdf": "cc:00.0", "cpu_affinity": "48-95,144-191",
                     "numa_node": "1", "connected_to": [12, 3, 4, 1], "nc_count": 4,
                     "logical_neuroncore_config": 2, "memory_size": 103079215104,
                     "neuroncore_ids": [0, 1, 2, 3],
                     "neuron_processes": [{"pid": 113985,
                                           "command": "neuron-bench exec --run-as-cc-neff --...",
                                           "neuron_runtime_version": "2.0.0"}]}


commands = st.text(st.characters(blacklist_characters="|", blacklist_categories=("Cs",)),
                   max_size=60)
processes = st.lists(st.builds(LsProcess, st.integers(1, 4_194_304), commands,
                               st.sampled_from(["2.0.0", "NA"])), max_size=3)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 15), processes, max_size=16), st.booleans(), st.booleans())
def test_tables_stay_rectangular_for_any_processes(procs, wide, show_all):
    text = render_table(view(procs=procs), wide=wide, show_all=show_all)
    table = [line for line in text.splitlines() if line[:1] in "+|"]
    assert len({len(line) for line in table}) == 1
    rule = table[0]
    assert set(rule) == {"+", "-"} and table[-1] == rule
    columns = rule.count("+") - 1
    assert all(line.count("|") == columns + 1 for line in table if line[0] == "|")
    if show_all and not wide:
        assert all(len(c.strip()) <= COMMAND_WIDTH for line in table if line[0] == "|"
                   for c in line.strip("|").split("|"))


# --------------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("ls") / "rt"
    root.mkdir(mode=0o700)
    mm = "matmul:m=1024,k=1024,n=1024"
    instance = start_instance(root, f"train={mm}@0-5", f"serve={mm}@6")
    by_tag = {h.read().tag: h.pid for h in shm.list_runtimes(root)}
    yield root, instance, (by_tag["train"], by_tag["serve"])
    stop_instance(root)


def neuron_ls(root, *args):
    return subprocess.run([*console_script("neuron-ls"), "--root", str(root), *args],
                          capture_output=True, timeout=60)


def test_cli_default_table_is_the_golden_table(sim):
    root, instance, _ = sim
    out = neuron_ls(root)
    assert out.returncode == 0 and out.stderr == b""
    expected = render_table(build_view(get_instance("trn2.48xlarge"), 2, instance.instance_id))
    assert out.stdout.decode() == expected


def test_cli_wide_lists_the_runtime_processes_per_device(sim):
    root, _, (train, serve) = sim
    text = neuron_ls(root, "-w").stdout.decode()
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ")][2:]
    pids = {}
    for row in rows:
        device = row[0] or device  # noqa: F821 (continuation rows leave the device blank)
        if row[5]:
            pids.setdefault(int(device), []).append(int(row[5]))
            assert row[6].startswith("device_model.runtime --instance trn2.48xlarge")
            assert row[7] != "NA"
    # 4 logical cores per device at LNC=2: cores 0-5 span devices 0-1, core 6 is on device 1.
    assert pids == {0: [train], 1: sorted([train, serve])}  # listed by pid


def test_cli_show_all_adds_itself_and_json_agrees(sim):
    root, _, (train, serve) = sim
    text = neuron_ls(root, "-a").stdout.decode()
    assert text.count("neuron-ls --root") == 16 and "| NA " in text
    devices = orjson.loads(neuron_ls(root, "-j").stdout)
    assert len(devices) == 16
    assert [p["pid"] for p in devices[1]["neuron_processes"]] == sorted([train, serve])
    assert devices[2]["neuron_processes"] == []
    everything = orjson.loads(neuron_ls(root, "-j", "-a").stdout)
    # neuron-ls itself after the runtimes, as AWS's example lists it
    assert all(d["neuron_processes"][-1]["neuron_runtime_version"] == "NA" for d in everything)
    assert [p["pid"] for p in everything[1]["neuron_processes"][:-1]] == sorted([train, serve])


def test_cli_topology(sim):
    root, _, _ = sim
    text = neuron_ls(root, "-t").stdout.decode()
    assert text.endswith(render_topology(build_view(get_instance("trn2.48xlarge"), 2, "")))


def test_cli_without_an_instance_prints_the_real_fatal_message(tmp_path):
    (tmp_path / "rt").mkdir(mode=0o700)  # a runtime directory, but no instance in it
    out = neuron_ls(tmp_path / "rt")
    assert out.returncode == 1 and out.stdout == b""
    err = out.stderr.decode()
    assert err.startswith('FATA[0000] Failed to discover neuron devices error="Unable to read '
                          'device information from the driver.')
    assert err.count("\n") == 1 and NO_DEVICE_MESSAGE.split("{")[0] in err


def test_cli_usage_errors_exit_2():
    out = subprocess.run([*console_script("neuron-ls"), "--bogus"], capture_output=True,
                         timeout=30)
    assert out.returncode == 2 and b"Traceback" not in out.stderr
