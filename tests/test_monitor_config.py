"""MonitorConfig: the neuron-monitor configuration file."""
from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.config import (DEFAULT_PERIOD, RUNTIME_GROUPS, SYSTEM_GROUPS, ConfigError,
                            MonitorConfig, due_groups, next_due, parse_period)

AWS_EXAMPLE = {
    "period": "1s",
    "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
        {"type": "neuroncore_counters"}, {"type": "memory_used"},
        {"type": "neuron_runtime_vcpu_usage"}, {"type": "execution_stats"}]}],
    "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"},
                       {"period": "2s", "type": "neuron_hw_counters"}],
}


def test_aws_example_with_inheritance():
    config = MonitorConfig.from_dict(AWS_EXAMPLE)
    assert config.period == 1.0
    assert config.runtime_groups_for("anything") == {
        "neuroncore_counters": 1.0, "memory_used": 1.0, "neuron_runtime_vcpu_usage": 1.0,
        "execution_stats": 1.0}
    assert config.system_groups == {"vcpu_usage": 1.0, "memory_info": 1.0, "neuron_hw_counters": 2.0}
    assert config.base_period == 1.0 and config.min_period == 1.0


def test_from_file(tmp_path):
    path = tmp_path / "monitor.conf"
    path.write_bytes(orjson.dumps(AWS_EXAMPLE))
    assert MonitorConfig.from_file(path) == MonitorConfig.from_dict(AWS_EXAMPLE)


def test_default_is_every_group_every_five_seconds():
    config = MonitorConfig.default()
    assert config.runtime_groups_for("12345") == dict.fromkeys(RUNTIME_GROUPS, DEFAULT_PERIOD)
    assert config.system_groups == dict.fromkeys(SYSTEM_GROUPS, DEFAULT_PERIOD)
    assert config.base_period == 5.0


def test_period_inherits_root_to_entry_to_metric():
    config = MonitorConfig.from_dict({"period": "2m", "neuron_runtimes": [
        {"tag_filter": "^train", "period": "10s", "metrics": [
            {"type": "neuroncore_counters"}, {"type": "memory_used", "period": "500ms"}]},
        {"tag_filter": "train_7b$", "metrics": [{"type": "neuroncore_counters", "period": "3s"},
                                                {"type": "execution_stats"}]}],
        "system_metrics": [{"type": "memory_info"}]})
    assert config.runtime_groups_for("train_7b") == {
        "neuroncore_counters": 3.0, "memory_used": 0.5, "execution_stats": 120.0}
    assert config.runtime_groups_for("train_1b") == {"neuroncore_counters": 10.0, "memory_used": 0.5}
    assert config.runtime_groups_for("serve") == {}
    assert config.system_groups == {"memory_info": 120.0}
    assert config.base_period == 0.5 and config.min_period == 0.5


def test_base_period_is_the_gcd():
    config = MonitorConfig.from_dict({"system_metrics": [
        {"type": "memory_info", "period": "2s"}, {"type": "vcpu_usage", "period": "3s"}]})
    assert config.base_period == 1.0 and config.min_period == 2.0


def test_config_with_no_runtimes_collects_no_runtime_groups():
    config = MonitorConfig.from_dict({"system_metrics": [{"type": "vcpu_usage"}]})
    assert config.runtime_groups_for("x") == {}
    assert config.system_groups == {"vcpu_usage": DEFAULT_PERIOD}


@pytest.mark.parametrize("text, seconds", [("1s", 1.0), ("2m", 120.0), ("500ms", 0.5),
                                           ("1.5s", 1.5), (" 5s ", 5.0), ("24m", 1440.0)])
def test_periods(text, seconds):
    assert parse_period(text) == seconds


@pytest.mark.parametrize("value", ["0s", "1h", "s", "-1s", "1 s", "1e3s", "", "25000m", 5, None, "NaNs"])
def test_bad_periods(value):
    with pytest.raises(ConfigError) as info:
        parse_period(value, "neuron_runtimes[0].period")
    assert str(info.value).startswith("neuron_runtimes[0].period: ")


@pytest.mark.parametrize("config, message", [
    ({"neuron_runtimes": [{"tag_filter": "([a-z"}]},
     "neuron_runtimes[0].tag_filter: invalid regular expression"),
    ({"neuron_runtimes": [{"tag_filter": 7}]}, "neuron_runtimes[0].tag_filter: expected"),
    ({"neuron_runtimes": [{"metrics": [{"type": "inference_stats"}]}]},
     "neuron_runtimes[0].metrics[0].type: metric type 'inference_stats' was renamed 'execution_stats'"),
    ({"neuron_runtimes": [{"metrics": [{"type": "gpu_util"}]}]},
     "neuron_runtimes[0].metrics[0].type: unknown metric type 'gpu_util'"),
    ({"neuron_runtimes": [{"metrics": [{"type": "vcpu_usage"}]}]},
     "neuron_runtimes[0].metrics[0].type: 'vcpu_usage' belongs in system_metrics"),
    ({"system_metrics": [{"type": "memory_used"}]},
     "system_metrics[0].type: 'memory_used' belongs in neuron_runtimes[].metrics"),
    ({"system_metrics": [{"period": "1s"}]}, "system_metrics[0].type: missing"),
    ({"system_metrics": [{"type": "vcpu_usage", "period": "0s"}]}, "system_metrics[0].period:"),
    ({"system_metrics": [{"type": "vcpu_usage", "peroid": "1s"}]},
     "system_metrics[0].peroid: unknown key"),
    ({"periods": "1s"}, "periods: unknown key"),
    ({"neuron_runtimes": {}}, "neuron_runtimes: expected an array, got object"),
    ({"neuron_runtimes": ["x"]}, "neuron_runtimes[0]: expected an object, got string"),
    ({"period": 1}, "period: expected a string"),
    ([], "config: expected an object, got array"),
])
def test_errors_name_the_field(config, message):
    with pytest.raises(ConfigError) as info:
        MonitorConfig.from_dict(config)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        MonitorConfig.from_file(tmp_path / "missing.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text("{period: 1s}")
    with pytest.raises(ConfigError, match="not valid JSON"):
        MonitorConfig.from_file(bad)
    bad.write_text('{"neuron_runtimes": [{"tag_filter": "("}]}')
    with pytest.raises(ConfigError, match=r"bad.conf: neuron_runtimes\[0\].tag_filter"):
        MonitorConfig.from_file(bad)


def test_to_dict_round_trips():
    config = MonitorConfig.from_dict(AWS_EXAMPLE)
    assert MonitorConfig.from_dict(config.to_dict()).runtime_groups_for("x") == \
        config.runtime_groups_for("x")
    assert MonitorConfig.from_dict(config.to_dict()).system_groups == config.system_groups


def test_due_and_next_due():
    periods = {"vcpu_usage": 1.0, "memory_info": 5.0}
    assert due_groups(periods, {}, 100.0) == ["vcpu_usage", "memory_info"]
    last = {"vcpu_usage": 100.0, "memory_info": 100.0}
    assert due_groups(periods, last, 100.5) == []
    assert next_due(periods, last, 100.5) == pytest.approx(0.5)
    assert due_groups(periods, last, 100.9995) == ["vcpu_usage"]  # 1 ms jitter slack
    assert due_groups(periods, last, 105.0) == ["vcpu_usage", "memory_info"]
    assert next_due({}, {}, 1.0) == math.inf


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                    lambda k: st.lists(k, max_size=3) | st.dictionaries(
                        st.sampled_from(["period", "neuron_runtimes", "system_metrics", "metrics",
                                         "type", "tag_filter", "x"]), k, max_size=3),
                    max_leaves=15)


@given(JSON)
def test_arbitrary_input_raises_only_config_error(value):
    try:
        config = MonitorConfig.from_dict(value)
    except ConfigError:
        return
    assert config.base_period > 0
    config.runtime_groups_for("tag")


@given(digit=st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()))
def test_periods_take_ascii_digits_only(digit):
    with pytest.raises(ConfigError, match="not a period"):
        parse_period(f"{digit}s")


@pytest.mark.parametrize("text", ["0.0000001s", "1ms", "0.009s", "9ms"])
def test_periods_below_the_minimum_are_refused(text):
    with pytest.raises(ConfigError, match="at least 10ms"):
        parse_period(text)
    assert parse_period("10ms") == pytest.approx(0.01)


@pytest.mark.parametrize("raw, message", [
    ('{"period": "1s"}'.encode("utf-16"), "UTF-16 text (it starts with a UTF-16 byte-order mark)"),
    (b'{"period": "1s\xff"}', "not UTF-8 text: byte 0xff at offset 14"),
])
def test_a_config_that_is_not_utf8_says_how(tmp_path, raw, message):
    path = tmp_path / "monitor.json"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MonitorConfig.from_file(path)
