"""The schema vocabulary of monitor/ against the chip model's counter layout and the sinks."""
from __future__ import annotations

from device_model.engine import isa
from device_model.runtime import layout
from exporters import metrics_table as mt
from monitor import vocab
from monitor.report import PERCENTILES


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
