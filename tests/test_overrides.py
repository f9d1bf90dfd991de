"""User override files: the happy path changes derived figures; every bad file is one clear line."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from device_model.catalog.costs import DEFAULT_COSTS
from device_model.errors import SpecError
from device_model.catalog.overrides import (_RANGES, DEVICE_FIELDS, DOC_BEGIN, DOC_END, Catalog, Overrides, apply,
                                    catalog_markdown, load_overrides, parse_overrides)
from device_model.catalog.specs import DEVICES, INSTANCES, get_device, get_instance

DOC = Path(__file__).resolve().parent.parent / "docs" / "devices.md"


def write(tmp_path: Path, text: str, name: str = "over.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_device_override_changes_derived_peak_everywhere(tmp_path):
    path = write(tmp_path, "[device.trainium2]\ntensor_hz = 2.0e9\nhbm_bw = 2_600_000_000_000\n")
    catalog = Catalog.default().with_overrides(load_overrides(path))
    base = get_device("trainium2").peak_flops("bf16")
    assert catalog.device("trainium2").peak_flops("bf16") == pytest.approx(base * 2.0 / 2.4)
    for name in ("trn2.48xlarge", "trn2u.48xlarge", "trn2u-ultraserver"):
        dev = catalog.instance(name).device
        assert dev.tensor_hz == 2.0e9 and dev.hbm_bw_per_stack == pytest.approx(650e9)
        assert isinstance(dev.hbm_bw, float)
    assert catalog.device("trainium1") == get_device("trainium1")
    assert get_device("trainium2").tensor_hz == 2.4e9            # the default is untouched


def test_instance_and_cost_overrides(tmp_path):
    path = write(tmp_path, """
[instance."trn2n.48xlarge"]     # an alias AWS examples use
efa_bw = 2.0e11
numa_nodes = 4.0

[costs]
dma_fixed_latency_s = 1.5e-6
cc_launch_s = 0                 # zero is the documented default
cc_link_efficiency = 1
""")
    catalog = apply(load_overrides(path))
    inst = catalog.instance("trn2.48xlarge")
    assert inst.efa_bw == 2.0e11 and inst.numa_nodes == 4 and isinstance(inst.numa_nodes, int)
    assert catalog.instance("trn2u.48xlarge") == get_instance("trn2u.48xlarge")
    assert catalog.costs.dma_fixed_latency_s == 1.5e-6 and catalog.costs.cc_launch_s == 0.0
    assert catalog.costs.min_ii_cycles == DEFAULT_COSTS.min_ii_cycles


def test_an_instances_efa_is_its_chips_shares_and_an_override_of_either_sets_both(tmp_path):
    """The collectives use a chip's share of the instance's EFA: trn1n.32xlarge's 1,600 Gbps
    gives each chip twice trn1.32xlarge's, trn1.2xlarge's one chip its 25 Gbps; overriding the
    instance's EFA (or the chip's) moves the other with it, and the two given apart must agree."""
    for inst in INSTANCES.values():
        assert inst.device.efa_bw * inst.devices == pytest.approx(inst.efa_bw)
    assert get_instance("trn1n.32xlarge").device.efa_bw == 2 * get_instance("trn1.32xlarge").device.efa_bw
    catalog = apply(load_overrides(write(tmp_path, '[instance."trn1.32xlarge"]\nefa_bw = 2e11\n')))
    assert catalog.instance("trn1.32xlarge").device.efa_bw == pytest.approx(2e11 / 16)
    catalog = apply(load_overrides(write(tmp_path, "[device.trainium2]\nefa_bw = 1e10\n")))
    assert catalog.instance("trn2.48xlarge").efa_bw == pytest.approx(16e10)
    both = '[device.trainium2]\nefa_bw = 1e10\n[instance."trn2.48xlarge"]\nefa_bw = 1e12\n'
    with pytest.raises(SpecError, match="efa_bw"):
        apply(load_overrides(write(tmp_path, both)))


def test_device_override_keeps_instance_specific_variant(tmp_path):
    path = write(tmp_path, "[device.trainium1]\ntensor_hz = 3e9\n")
    catalog = apply(load_overrides(path))
    trn1n = catalog.instance("trn1n.32xlarge").device
    assert trn1n.tensor_hz == 3e9 and trn1n.neuronlink_bw == pytest.approx(768e9)


def test_torus_and_lnc_overrides(tmp_path):
    path = write(tmp_path, """
[device.trainium2]
default_lnc = 1
mx_speedup = 0
[instance."trn1.32xlarge"]
torus_dims = [2, 8]
""")
    catalog = apply(load_overrides(path))
    assert catalog.instance("trn2.48xlarge").device.default_lnc == 1
    assert catalog.instance("trn1.32xlarge").torus_dims == (2, 8)


def test_empty_overrides_are_the_identity():
    catalog = Catalog.default().with_overrides(Overrides())
    assert dict(catalog.devices) == dict(DEVICES) and dict(catalog.instances) == dict(INSTANCES)
    assert catalog.costs == DEFAULT_COSTS
    assert catalog.instance_names() == tuple(INSTANCES)


BAD = [
    # (file text, words the one-line message must contain)
    ("[device.trainium2\ntensor_hz = 1", ["malformed TOML"]),
    ("tensor_hz = 1", ["tensor_hz is outside any table (a device field: under [device."]),
    ("exec_overhead_s = 6e-5", ["exec_overhead_s is outside any table (a cost: under [costs])"]),
    ("[gpu.h100]\nx = 1", ["unknown table [gpu]"]),
    ("device = 3", ["[device]", "tables"]),
    ("[device.trainium9]\ntensor_hz = 1", ["[device.trainium9]", "unknown device 'trainium9'",
                                           "allowed: trainium1"]),
    ("[instance.trn2.48xlarge]\nvcpus = 1", ["unknown instance 'trn2'", "quote"]),
    # a near miss is named alone; anything else lists the fields
    ("[device.trainium2]\ntensr_hz = 1", ["[device.trainium2]", "unknown field 'tensr_hz'",
                                          "did you mean 'tensor_hz'?"]),
    ("[costs]\ncc_allredce_fp32_fraction = 1", ["[costs]", "unknown field",
                                                "did you mean 'cc_allreduce_fp32_fraction'?"]),
    ("[device.trainium2]\nname = 'x'", ["unknown field 'name'", "allowed: physical_cores, "]),
    ("[device.trainium2]\ntensor_hz = 'fast'", ["[device.trainium2]", "'tensor_hz'",
                                                "expected a number"]),
    ("[device.trainium2]\ntensor_hz = true", ["'tensor_hz'", "expected a number"]),
    ("[device.trainium2]\ntensor_hz = [1, 2]", ["'tensor_hz'", "expected a number"]),
    ("[device.trainium2]\ntensor_hz = -2.4e9", ["'tensor_hz'", "must be > 0"]),
    ("[device.trainium2]\nhbm_stacks = 0", ["'hbm_stacks'", "must be > 0"]),
    ("[device.trainium2]\nmx_speedup = -1", ["'mx_speedup'", "must be >= 0"]),
    ("[device.trainium2]\ntensor_hz = nan", ["'tensor_hz'", "finite"]),
    ("[device.trainium2]\nhbm_bw = inf", ["'hbm_bw'", "finite"]),
    # positive but no physical clock or bandwidth: divided by zero or gave NaN figures
    ("[device.trainium2]\ntensor_hz = 1e-308", ["'tensor_hz'", "between 1e+06 and 1e+11 Hz"]),
    ("[device.trainium2]\nhbm_bw = 1e-300", ["'hbm_bw'", "between 1e+06 and 1e+16 bytes/s"]),
    ('[instance."trn2.48xlarge"]\nefa_bw = 1e30', ["'efa_bw'", "bytes/s"]),
    # a memory of 1,000 bytes: the refusal said "over by 1236690434%"
    ("[device.trainium2]\nhbm_bytes = 1000", ["'hbm_bytes'", "between 1,024 bytes (1 KiB)"]),
    # one instruction per transfer: 1-byte transfers ran for minutes, then out of memory
    ("[costs]\ndma_transfer_bytes = 1", ["'dma_transfer_bytes'", "between 512 bytes"]),
    ("[device.trainium2]\nphysical_cores = 7.5", ["'physical_cores'", "integer"]),
    ("[device.trainium2]\ndefault_lnc = 3", ["[device.trainium2]", "default_lnc=3"]),
    ("[device.trainium2]\nphysical_cores = 6", ["[device.trainium2]", "hbm_stacks"]),
    ("[device.trainium2]\nidle_watts = 900", ["idle_watts"]),
    ('[instance."trn2.48xlarge"]\ndevices = 8', ['[instance."trn2.48xlarge"]', "devices=8"]),
    ('[instance."trn2.48xlarge"]\ntorus_dims = [4, 0]', ["'torus_dims'", "positive integers"]),
    ('[instance."trn2.48xlarge"]\ntorus_dims = [2, 2, 4]', ["torus_dims"]),
    ('[instance."trn2.48xlarge"]\nvcpus = 191', ["vcpus=191"]),
    ('[instance."trn2.48xlarge"]\nis_ultraserver = 1', ["unknown field 'is_ultraserver'"]),
    ("[costs]\ncc_link_efficiency = 1.5", ["[costs]", "'cc_link_efficiency'", "<= 1"]),
    ("[costs]\nmin_ii_cycles = 0", ["[costs]", "'min_ii_cycles'", "> 0"]),
    ("[costs]\nnot_a_cost = 1", ["[costs]", "unknown field 'not_a_cost'"]),
    ("costs = 1", ["[costs]", "table"]),
]


@pytest.mark.parametrize("text, words", BAD, ids=[b[1][-1] for b in BAD])
def test_bad_files_give_one_line_naming_file_table_and_field(tmp_path, text, words):
    path = write(tmp_path, text, "bad-file.toml")
    with pytest.raises(SpecError) as err:
        apply(load_overrides(path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("content, words", [
    (None, ["cannot read"]),
    (b"\xff\xfe[device]", ["not UTF-8"]),
    (b"# pad\n" * 200_000, ["larger than"]),
])
def test_unreadable_files(tmp_path, content, words):
    path = tmp_path / "x.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_overrides(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    for word in words:
        assert word in str(err.value)


FLOAT_FIELDS = sorted(f for f, kind in DEVICE_FIELDS.items() if kind is float and f != "ambient_c")


@given(st.sampled_from(FLOAT_FIELDS), st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_is_accepted_or_named_in_the_error(name, value):
    data = {"device": {"trainium3": {name: value}}}
    try:
        catalog = apply(parse_overrides(data, "h.toml"))
    except SpecError as exc:
        assert name in str(exc) and str(exc).startswith("h.toml: [device.trainium3]")
        zero_ok = name == "mx_speedup" and value == 0
        physical = next(((lo, hi) for suffix, lo, hi, _ in _RANGES if name.endswith(suffix)),
                        (0.0, math.inf))
        in_range = physical[0] <= value <= physical[1]
        assert not (math.isfinite(value) and (value > 0 or zero_ok) and in_range) \
            or name == "idle_watts" or name == "tdp_watts"   # idle <= tdp: a cross-field rule
    else:
        assert getattr(catalog.device("trainium3"), name) == value
        assert getattr(catalog.instance("trn3-ultraserver").device, name) == value


def test_docs_catalog_is_current():
    text = DOC.read_text(encoding="utf-8")
    generated = text.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0]
    assert generated.strip() == catalog_markdown().strip(), \
        "docs/devices.md is stale: run python -m device_model.catalog.overrides --update docs/devices.md"


def test_docs_override_example_applies(tmp_path):
    example = re.search(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    catalog = apply(load_overrides(write(tmp_path, example)))
    assert catalog.instance("trn2.48xlarge").device.tensor_hz == 2.0e9
    assert catalog.device("trainium2").peak_flops("bf16") == pytest.approx(6.5536e13)


def test_catalog_markdown_tables_every_device_and_instance():
    text = catalog_markdown()
    for name in [*DEVICES, *INSTANCES]:
        assert f"### {name}" in text
    assert "| `tensor_hz` | 2.4 GHz | N1: Tensor 2.4 GHz |" in text
    assert "| `efa_bw` | 3200 Gbps | A3: 3,200 Gbps EFAv3 |" in text


def test_a_table_no_instance_of_the_run_takes_is_named(tmp_path, capsys):
    from device_model.cli import main
    path = write(tmp_path, '[device.trainium1]\nhbm_bw = 1e12\n[instance."trn1.32xlarge"]\n'
                           'vcpus = 64\n[device.trainium2]\ntensor_hz = 2.0e9\n')
    base = ["estimate", "-w", "mlp", "--overrides", str(path), "--json"]
    assert main([*base, "-i", "trn2.48xlarge"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "changes nothing" in line]
    assert len(warned) == 2, warned
    assert "[device.trainium1]" in warned[0] and "trn2.48xlarge (trainium2)" in warned[0]
    assert '[instance."trn1.32xlarge"]' in warned[1]
    # each table applies to one side of the comparison: nothing to say
    assert main([*base, "-i", "trn2.48xlarge", "--vs", "instance=trn1.32xlarge"]) == 0
    assert "changes nothing" not in capsys.readouterr().err
    assert main([*base, "-i", "trn1.32xlarge"]) == 0
    assert capsys.readouterr().err.count("changes nothing") == 1   # only [device.trainium2]
