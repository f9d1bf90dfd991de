"""The schema vocabulary of monitor/ against the chip model's counter layout and the sinks."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from device_model.engine import isa
from device_model.runtime import layout
from exporters import metrics_table as mt
from monitor import vocab
from monitor.config import MonitorConfig
from monitor.report import PERCENTILES, Report, RuntimeReport, SystemData
from monitor.report_runtime import RUNTIME_GROUP_PARSERS
from monitor.report_system import SYSTEM_GROUP_PARSERS

FIXTURES = Path(__file__).parent / "fixtures"


def test_counter_layout_speaks_the_schema_vocabulary():
    # The collector zips the layout's axes with these names: the orders must match too.
    assert layout.ENGINES == vocab.ENGINES
    assert layout.DMA_QUEUES == vocab.DMA_QUEUES
    assert layout.EXEC_STATUS == vocab.EXEC_STATUS
    assert layout.ERROR_KINDS == vocab.ERROR_KINDS
    assert layout.HOST_MEMORY == vocab.HOST_MEMORY
    assert layout.DEVICE_MEMORY == vocab.CORE_MEMORY
    assert layout.ECC_KINDS == vocab.ECC_KINDS


def test_every_reported_engine_is_a_modelled_engine():
    assert set(vocab.ENGINES) <= set(isa.ENGINES)
    assert set(isa.COMPUTE_ENGINES) <= set(vocab.ENGINES)


def test_labels_and_percentiles_cover_the_vocabulary():
    assert tuple(vocab.ENGINE_LABELS) == vocab.ENGINES
    assert len(vocab.PERCENT_POINTS) == len(vocab.PERCENTILES)
    assert vocab.PERCENTILES == tuple(f"p{p:g}" for p in vocab.PERCENT_POINTS)
    assert PERCENTILES == vocab.PERCENTILES


def test_metric_units_are_named_in_the_vocabulary():
    used = {spec.unit for spec in mt.ALL_METRICS} - {""}
    assert used <= set(vocab.UNITS), used - set(vocab.UNITS)


def test_metric_groups_are_spelled_by_the_vocabulary():
    # The parsers, the config and the dump all take the groups from vocab, in its order.
    assert tuple(RUNTIME_GROUP_PARSERS) == vocab.RUNTIME_GROUPS
    assert tuple(SYSTEM_GROUP_PARSERS) == vocab.SYSTEM_GROUPS
    assert set(vocab.AWS_RUNTIME_GROUPS) <= set(vocab.RUNTIME_GROUPS)
    config = MonitorConfig.default()
    assert tuple(config.runtime_groups_for("any")) == vocab.RUNTIME_GROUPS
    assert tuple(config.system_groups) == vocab.SYSTEM_GROUPS
    for table, cls in ((RUNTIME_GROUP_PARSERS, RuntimeReport), (SYSTEM_GROUP_PARSERS, SystemData)):
        assert {attr for attr, _ in table.values()} <= {f.name for f in fields(cls)}


def test_a_report_dumps_its_groups_in_the_vocabulary_order():
    text = (FIXTURES / "neuron_monitor_extensions.json").read_text()
    report = Report.from_json(text)
    runtime = report.runtimes[0]
    present = [key for key, group in runtime.groups() if group is not None]
    assert list(runtime.dump()["report"]) == present and len(present) >= 4
    assert [k for k in report.system.dump() if k in vocab.SYSTEM_GROUPS] == \
        [key for key, group in report.system.groups() if group is not None]
    old = (FIXTURES / "neuron_monitor_inference_stats.json").read_text()
    renamed = Report.from_json(old).runtimes[0]
    assert renamed.group("execution_stats") is not None
    assert "inference_stats" not in renamed.dump()["report"]
