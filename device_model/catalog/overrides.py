"""User overrides of the catalog, and the `Catalog` that applies them.

An override file is TOML with three kinds of table (docs/devices.md has an example):

    [device.trainium2]          any numeric DeviceSpec field
    [instance."trn2.48xlarge"]  any numeric InstanceSpec field, or torus_dims = [4, 4]
    [costs]                     any CostParams field

    catalog = Catalog.default().with_overrides(load_overrides(path))

Every problem (unreadable or malformed file, unknown table or field, wrong type, non-positive
value, broken invariant) is one SpecError line naming the file, the table and the field.
"""
from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType

from .costs import DEFAULT_COSTS, CostParams
from ..errors import SpecError, did_you_mean, unknown_name
from .specs import (DEVICES, INSTANCE_ALIASES, INSTANCES, DeviceSpec, InstanceSpec,
                    validate_device, validate_instance)

MAX_FILE_BYTES = 1 << 20        # an override file is a few lines; refuse anything huge
_TABLES = ("device", "instance", "costs")
# Fields where 0 is meaningful: "unsupported" (mx_speedup), a fixed cost switched off
# (cc_launch_s, generation_start_s), dequantization for free (weight_dequant_passes), no weight
# prefetch beyond the previous op (weight_prefetch_ops); a temperature may be any number.
_ZERO_OK = ({"mx_speedup", "cc_launch_s", "generation_start_s", "weight_prefetch_ops",
             "weight_dequant_passes"}
            | {f.name for f in fields(CostParams) if getattr(DEFAULT_COSTS, f.name) == 0})
_ANY_SIGN = {"ambient_c"}
_RATIO_SUFFIXES = ("_fraction", "_ratio", "_efficiency")
# Physical ranges by unit (name suffix): a clock of 1e-308 Hz or a bandwidth of 1e-300 B/s is
# positive, and divided the model by zero or filled it with NaN
_RANGES = (("_hz", 1e6, 1e11, "Hz"), ("_bw", 1e6, 1e16, "bytes/s"))
# memories of a chip or host: hbm_bytes = 1000 was taken, and a model "over by 1,236,690,434 %"
_MEMORY_SIZES = ("sbuf_bytes", "psum_bytes", "hbm_bytes", "host_memory_bytes")
_MEMORY_RANGE = (1 << 10, 1 << 50)
# DMA transfer and packet sizes: every transfer is an instruction the model simulates, so a
# 1-byte transfer turned one estimate into billions of them (minutes, then out of memory)
_TRANSFER_SIZES = ("dma_transfer_bytes", "dma_packet_bytes", "cc_dma_packet_bytes")
_TRANSFER_RANGE = (512, 1 << 30)


def _numeric_fields(cls: type) -> dict[str, type]:
    """Overridable fields of a dataclass: those annotated `int` or `float`."""
    kinds = {"int": int, "float": float}
    return {f.name: kinds[str(f.type)] for f in fields(cls) if str(f.type) in kinds}


DEVICE_FIELDS = _numeric_fields(DeviceSpec)
INSTANCE_FIELDS = {**_numeric_fields(InstanceSpec), "torus_dims": tuple}
COST_FIELDS = _numeric_fields(CostParams)


@dataclass(frozen=True, slots=True)
class Overrides:
    """Validated override values, keyed by catalog name; `source` names the file in errors."""

    source: str = "<defaults>"
    devices: Mapping[str, Mapping[str, object]] = field(default_factory=dict, hash=False)
    instances: Mapping[str, Mapping[str, object]] = field(default_factory=dict, hash=False)
    costs: Mapping[str, object] = field(default_factory=dict, hash=False)

    def not_applying(self, used: tuple[InstanceSpec, ...]) -> list[str]:
        """The tables that change none of the instances a run uses, one line each: a
        [device.trainium1] table does nothing to a trn2 estimate, and silence reads as "applied"."""
        names = {spec.name for spec in used}
        chips = {spec.device.name: spec.name for spec in used}
        where = ", ".join(sorted(f"{spec.name} ({spec.device.name})" for spec in used))
        lines = [f"{self.source}: [device.{name}] changes nothing here: the run uses {where}"
                 for name in self.devices if name not in chips]
        lines += [f'{self.source}: [instance."{name}"] changes nothing here: the run uses {where}'
                  for name in self.instances if name not in names]
        return lines


def load_overrides(path: str | Path) -> Overrides:
    """Read and validate a TOML override file; SpecError (one line) on any problem."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{source}: cannot read override file: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{source}: override file is larger than {MAX_FILE_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SpecError(f"{source}: override file is not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: malformed TOML: {exc}") from None
    return parse_overrides(data, source)


def parse_overrides(data: Mapping[str, object], source: str = "<overrides>") -> Overrides:
    """Validate an already-parsed TOML document (a dict) into Overrides."""
    for key, value in data.items():
        if key in _TABLES:
            continue
        if not isinstance(value, Mapping):      # `exec_overhead_s = 6e-5` above every table
            where = (" (a cost: under [costs])" if key in COST_FIELDS else
                     " (a device field: under [device.<name>])" if key in DEVICE_FIELDS else
                     " (an instance field: under [instance.\"<name>\"])"
                     if key in INSTANCE_FIELDS else "")
            raise SpecError(f"{source}: {key} is outside any table{where}; allowed: "
                            f"[device.<name>], [instance.\"<name>\"], [costs]")
        raise SpecError(f"{source}: unknown table [{key}]; allowed: [device.<name>], "
                        f"[instance.\"<name>\"], [costs]")
    return Overrides(
        source=source,
        devices=_named_tables(data.get("device", {}), "device", source),
        instances=_named_tables(data.get("instance", {}), "instance", source),
        costs=_table_values(data.get("costs", {}), "costs", COST_FIELDS, source),
    )


def _named_tables(section: object, kind: str, source: str) -> Mapping[str, Mapping[str, object]]:
    known = DEVICES if kind == "device" else INSTANCES
    allowed_fields = DEVICE_FIELDS if kind == "device" else INSTANCE_FIELDS
    if not isinstance(section, dict):
        raise SpecError(f"{source}: [{kind}] must hold tables like [{kind}.<name>]")
    out: dict[str, Mapping[str, object]] = {}
    for name, table in section.items():
        key = name.lower()
        key = INSTANCE_ALIASES.get(key, key) if kind == "instance" else key
        if key not in known:
            hint = ('; quote names with dots: [instance."trn2.48xlarge"]'
                    if kind == "instance" else "")
            raise SpecError(f"{source}: [{kind}.{name}] {unknown_name(kind, name, known)}{hint}")
        label = f'instance."{key}"' if kind == "instance" else f"device.{key}"
        out[key] = _table_values(table, label, allowed_fields, source)
    return MappingProxyType(out)


def _table_values(table: object, label: str, allowed: Mapping[str, type],
                  source: str) -> Mapping[str, object]:
    if not isinstance(table, dict):
        raise SpecError(f"{source}: [{label}] must be a table of field = value")
    values = {}
    for name, value in table.items():
        if name not in allowed:
            # a near miss is named alone (the costs table has fifty fields: a line of them hid
            # the one the user meant); anything else lists them all
            hint = did_you_mean(name, allowed)
            raise SpecError(f"{source}: [{label}] unknown field {name!r}; "
                            + (hint.rstrip() if hint else f"allowed: {', '.join(allowed)}"))
        problem, converted = _check_value(name, value, allowed[name])
        if problem:
            raise SpecError(f"{source}: [{label}] field {name!r}: {problem}")
        values[name] = converted
    return MappingProxyType(values)


def _check_value(name: str, value: object, kind: type) -> tuple[str, object]:
    """('', converted value) if acceptable, else (problem, None)."""
    if kind is tuple:
        if (not isinstance(value, list) or not value
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)):
            return f"expected a list of positive integers, got {value!r}", None
        return "", tuple(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {type(value).__name__} {value!r}", None
    if not math.isfinite(value):
        return f"expected a finite number, got {value!r}", None
    if kind is int:
        if value != int(value):
            return f"expected an integer, got {value!r}", None
        value = int(value)
    else:
        value = float(value)
    if name in _ANY_SIGN:
        return "", value
    if value < 0 or (value == 0 and name not in _ZERO_OK):
        bound = ">= 0" if name in _ZERO_OK else "> 0"
        return f"got {value!r}, must be {bound}", None
    if name.endswith(_RATIO_SUFFIXES) and value > 1:
        return f"got {value!r}, must be a ratio <= 1", None
    for suffix, least, most, unit in _RANGES:
        if name.endswith(suffix) and not least <= value <= most:
            return f"got {value!r}, must be between {least:g} and {most:g} {unit}", None
    least, most = _MEMORY_RANGE
    if name in _MEMORY_SIZES and not least <= value <= most:
        return f"got {value!r}, must be between {least:,} bytes (1 KiB) and {most:,} (1 PiB)", None
    least, most = _TRANSFER_RANGE
    if name in _TRANSFER_SIZES and not least <= value <= most:
        return f"got {value!r}, must be between {least} bytes and {most:,} (1 GiB)", None
    return "", value


@dataclass(frozen=True, slots=True)
class Catalog:
    """The device and instance catalogs plus cost constants, possibly overridden."""

    devices: Mapping[str, DeviceSpec] = field(hash=False)
    instances: Mapping[str, InstanceSpec] = field(hash=False)
    costs: CostParams

    @classmethod
    def default(cls) -> Catalog:
        return cls(DEVICES, INSTANCES, DEFAULT_COSTS)

    def device(self, name: str) -> DeviceSpec:
        key = name.strip().lower() if isinstance(name, str) else ""
        if key not in self.devices:
            raise unknown_name("device", name, self.devices)
        return self.devices[key]

    def instance(self, name: str) -> InstanceSpec:
        key = name.strip().lower() if isinstance(name, str) else ""
        key = INSTANCE_ALIASES.get(key, key)
        if key not in self.instances:
            raise unknown_name("instance", name, self.instances)
        return self.instances[key]

    def instance_names(self) -> tuple[str, ...]:
        return tuple(self.instances)

    def with_overrides(self, ov: Overrides) -> Catalog:
        """A new Catalog; an instance's device carries the overrides of its device name."""
        devices = {name: _checked(validate_device, replace(dev, **ov.devices.get(name, {})),
                                  ov.source, f"device.{name}")
                   for name, dev in self.devices.items()}
        instances = {}
        for name, inst in self.instances.items():
            dev_ov, inst_ov = ov.devices.get(inst.device.name, {}), dict(ov.instances.get(name, {}))
            dev = replace(inst.device, **dev_ov)
            dev, inst_ov = _shared_efa(dev, inst, dev_ov, inst_ov)
            new = replace(inst, device=dev, **inst_ov)
            instances[name] = _checked(validate_instance, new, ov.source, f'instance."{name}"')
        return Catalog(MappingProxyType(devices), MappingProxyType(instances),
                       self.costs.with_overrides(dict(ov.costs)))


def _shared_efa(dev: DeviceSpec, inst: InstanceSpec, dev_ov: Mapping, inst_ov: dict):
    """An instance's EFA is shared by its chips (the device's `efa_bw` is one chip's share, which
    the collectives use): overriding one of the two, or the chip count, sets the other; both
    overridden are left as given for validate_instance to check."""
    chips = inst_ov.get("devices", inst.devices)
    if "efa_bw" in dev_ov and "efa_bw" not in inst_ov:
        inst_ov["efa_bw"] = dev.efa_bw * chips
    elif "efa_bw" not in dev_ov:
        dev = replace(dev, efa_bw=inst_ov.get("efa_bw", inst.efa_bw) / chips)
    return dev, inst_ov


def _checked(validate, spec, source: str, label: str):
    try:
        return validate(spec)
    except SpecError as exc:
        raise SpecError(f"{source}: [{label}] {exc}") from None


def apply(overrides: Overrides) -> Catalog:
    """The default catalog with `overrides` applied."""
    return Catalog.default().with_overrides(overrides)


# --- docs/devices.md: the catalog tabled with the sources of its constants ---------------------

DOC_BEGIN = ("<!-- BEGIN GENERATED CATALOG "
             "(python -m device_model.catalog.overrides --update docs/devices.md) -->")
DOC_END = "<!-- END GENERATED CATALOG -->"


def constant_sources() -> dict[tuple[str, str], str]:
    """(device or instance name, field) -> the trailing source comment in specs.py.

    Read from the source text so the comment next to a constant is its documentation;
    marketing figures appear as ("trainium2", "marketing_tflops.bf16")."""
    import ast
    import io
    import tokenize

    from . import specs

    text = Path(specs.__file__).read_text(encoding="utf-8")
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT}
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") in
                ("DeviceSpec", "InstanceSpec")):
            continue
        kwargs = {kw.arg: kw.value for kw in node.keywords}
        owner = ast.literal_eval(kwargs["name"])
        for arg, value in kwargs.items():
            if arg == "marketing_tflops" and isinstance(value, ast.Call):
                table = value.args[0]
                for k, v in zip(table.keys, table.values):
                    found[(owner, f"marketing_tflops.{ast.literal_eval(k)}")] = comments.get(
                        v.end_lineno, "")
            else:
                found[(owner, arg)] = comments.get(value.end_lineno, "")
    return found


def _human(name: str, value: object) -> str:
    """A catalog value in the unit a datasheet would use."""
    if value is None:
        return "—"
    if isinstance(value, tuple):
        return " × ".join(map(str, value)) if name == "torus_dims" else ", ".join(map(str, value))
    if isinstance(value, (bool, str)):
        return str(value)
    if name.endswith("_hz"):
        return f"{value / 1e9:g} GHz"
    if name.endswith("_bytes"):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:g} {unit}"
        return f"{value} B"
    if name == "efa_bw":
        return f"{value * 8 / 1e9:g} Gbps"
    if name.endswith("_bw"):
        return f"{value / 1e9:g} GB/s"
    units = {"_watts": " W", "_c_per_w": " °C/W", "_c": " °C",
             "_speedup": "×", "_slowdown": "×"}
    suffix = next((u for end, u in units.items() if name.endswith(end)), "")
    return f"{value:g}{suffix}"


def _rows(pairs: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| field | value | source |", "|---|---|---|"]
    return lines + [f"| `{f}` | {v} | {s} |" for f, v, s in pairs]


def _device_section(dev: DeviceSpec, sources: dict[tuple[str, str], str]) -> list[str]:
    pairs = []
    for f in fields(DeviceSpec):
        value = getattr(dev, f.name)
        if f.name == "marketing_tflops":
            pairs += [(f"marketing_tflops.{k}", f"{v:g} TFLOP/s",
                       sources.get((dev.name, f"marketing_tflops.{k}"), ""))
                      for k, v in value.items()]
        elif f.name != "name":
            pairs.append((f.name, _human(f.name, value), sources.get((dev.name, f.name), "")))
    pairs += [(f"peak_flops('{d}') per core", f"{dev.peak_flops(d) / 1e12:.1f} TFLOP/s", "derived")
              for d in dev.dtypes]
    pairs += [("hbm_bw_per_stack", _human("hbm_bw", dev.hbm_bw_per_stack), "derived"),
              ("cores_per_stack", str(dev.cores_per_stack), "derived"),
              ("dma_bw_per_core", _human("dma_bw", dev.dma_bw_per_core), "derived")]
    return [f"### {dev.name} ({dev.core_arch})", "", *_rows(pairs), ""]


def _instance_section(inst: InstanceSpec, base: DeviceSpec,
                      sources: dict[tuple[str, str], str]) -> list[str]:
    pairs = []
    for f in fields(InstanceSpec):
        value = getattr(inst, f.name)
        if f.name == "device":
            changed = [f"{g.name} = {_human(g.name, getattr(value, g.name))}"
                       for g in fields(DeviceSpec)
                       if getattr(value, g.name) != getattr(base, g.name)]
            shown = value.name + (f" with {', '.join(changed)}" if changed else "")
            pairs.append(("device", shown, sources.get((inst.name, "device"), "")))
        elif f.name != "name":
            pairs.append((f.name, _human(f.name, value), sources.get((inst.name, f.name), "")))
    cores = ", ".join(f"{inst.logical_cores(n)} at LNC={n}" for n in inst.device.lnc_options)
    pairs += [("physical cores", str(inst.physical_cores), "derived"),
              ("logical cores", cores, "derived"),
              ("HBM", _human("hbm_bytes", inst.hbm_bytes), "derived"),
              ("HBM bandwidth", f"{inst.hbm_bw / 1e12:g} TB/s", "derived"),
              ("peak BF16", f"{inst.peak_flops('bf16') / 1e15:.2f} PFLOP/s", "derived")]
    return [f"### {inst.name}", "", *_rows(pairs), ""]


def catalog_markdown(catalog: Catalog | None = None) -> str:
    """Markdown tables of every device and instance constant with its source."""
    catalog = catalog or Catalog.default()
    sources = constant_sources()
    lines = ["## Devices", ""]
    for dev in catalog.devices.values():
        lines += _device_section(dev, sources)
    lines += ["## Instances", ""]
    for inst in catalog.instances.values():
        lines += _instance_section(inst, catalog.devices[inst.device.name], sources)
    return "\n".join(lines).rstrip() + "\n"


def update_doc(path: str | Path) -> bool:
    """Rewrite the generated block of `path` (temp file + rename); True if it changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    head, sep, rest = text.partition(DOC_BEGIN)
    _, sep2, tail = rest.partition(DOC_END)
    if not (sep and sep2):
        raise SpecError(f"{path}: generated-catalog markers not found")
    new = f"{head}{DOC_BEGIN}\n\n{catalog_markdown()}\n{DOC_END}{tail}"
    if new == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return True


def main(argv: list[str]) -> int:
    """`python -m device_model.catalog.overrides [--update docs/devices.md]`: print or refresh the doc."""
    import sys

    try:
        if argv[:1] == ["--update"] and len(argv) == 2:
            print("updated" if update_doc(argv[1]) else "up to date", file=sys.stderr)
        elif not argv:
            sys.stdout.write(catalog_markdown())
        else:
            print("usage: python -m device_model.catalog.overrides [--update docs/devices.md]",
                  file=sys.stderr)
            return 2
    except (SpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
