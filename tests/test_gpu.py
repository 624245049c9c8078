"""Tests of gpu.py: GPU reading: the run file's readings, the tools' parsers, the series."""

import pytest

from router_latency.gpu import (GpuReading, parse_amd_smi, parse_nvidia_smi, parse_rocm_smi,
                                select_gpus)
from conftest import (AMD_SMI_MI300X_SHAPED, NVIDIA_TWO, ROCM_MI250, ROCM_RX7900XTX, ROCM_WARNING,
                      state)


# RX 6700 XT, ROCm 6.0.2 (the secondary-die string printed for a single die, rocm_smi_lib#149):
# excerpt of influxdata/telegraf plugins/inputs/amd_rocm_smi/testdata/rx6700xt_rocm602.json
ROCM_RX6700XT_602 = (
    '{"card0": {"Temperature (Sensor edge) (C)": "45.0", "Temperature (Sensor junction) (C)": '
    '"47.0", "mclk clock speed:": "(96Mhz)", "sclk clock speed:": "(500Mhz)", '
    '"Average Graphics Package Power (W)": "N/A (Secondary die)", "GPU use (%)": "0", '
    '"VRAM Total Used Memory (B)": "1572757504", "VIS_VRAM Total Used Memory (B)": '
    '"70930432"}}')


# ROCm of 2019 (lower-case '(c)', 'Sensor mem'), `rocm-smi -f -t -P --json`, pasted whole in
# github.com/RainbowMiner/RainbowMiner/issues/749
ROCM_2019 = (
    '{"card0": {"Fan Speed (%)": "45", "Average Graphics Package Power (W)": "222.0", '
    '"Temperature (Sensor mem) (c)": "79.0", "Fan Speed (level)": "117", "Temperature (Sensor '
    'junction) (c)": "103.0", "Temperature (Sensor edge) (c)": "77.0"}}')


# Radeon 780M APU, rocm-smi-lib 6.2.4: edge sensor only, current socket power; excerpt of the
# output pasted in github.com/sebhildebrandt/systeminformation/pull/960
ROCM_780M = (
    '{"card0": {"Temperature (Sensor edge) (C)": "31.0", "mclk clock speed:": "(400Mhz)", '
    '"sclk clock speed:": "(800Mhz)", "Current Socket Graphics Package Power (W)": "7.222", '
    '"GPU use (%)": "19"}}')


# amd-smi metric -p --json, ROCm 6.1: the example in the official amdsmi CHANGELOG (whole)
AMD_SMI_61_POWER = """[
    {
        "gpu": 0,
        "power": {
            "socket_power": {"value": 10, "unit": "W"},
            "gfx_voltage": {"value": 6, "unit": "mV"},
            "soc_voltage": {"value": 918, "unit": "mV"},
            "mem_voltage": {"value": 1250, "unit": "mV"},
            "power_management": "ENABLED",
            "throttle_status": "UNTHROTTLED"
        }
    }
]
"""


# amd-smi metric --gpu 1 --json, AMD-SMI 26.2.1 / ROCm 7.2.0 (two Radeon AI PRO R9700): the
# "gpu_data" wrapper, an excerpt of github.com/ROCm/ROCm/issues/5706 (jpeg_activity and the
# sections after usage left out, braces closed)
AMD_SMI_72_USAGE = """{
    "gpu_data": [
        {
            "gpu": 1,
            "usage": {
                "gfx_activity": {"value": 100, "unit": "%"},
                "umc_activity": {"value": 0, "unit": "%"},
                "mm_activity": {"value": 0, "unit": "%"},
                "vcn_activity": [{"value": 0, "unit": "%"}, "N/A", "N/A", "N/A"]
            }
        }
    ]
}
"""


# `nvidia-smi --query-gpu=... --format=csv` (header and units), captured by
# github.com/utkuozdemir/nvidia_gpu_exporter internal/captures (H100, driver 590.48), columns
# cut to ours: under load, and with MIG on (utilization.gpu [N/A])
NVIDIA_H100 = """name, index, memory.used [MiB], utilization.gpu [%], temperature.gpu, \
power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz]
NVIDIA H100 80GB HBM3, 0, 19818 MiB, 100 %, 59, 631.95 W, 1980 MHz, 2619 MHz
"""


NVIDIA_H100_MIG = """name, index, memory.used [MiB], utilization.gpu [%], temperature.gpu, \
power.draw [W], clocks.current.sm [MHz], clocks.current.memory [MHz]
NVIDIA H100 80GB HBM3, 0, 11125 MiB, [N/A], 53, 433.78 W, 1980 MHz, 2619 MHz
"""


def test_parse_rocm_smi_real_samples():
    reading = parse_rocm_smi(ROCM_WARNING + ROCM_RX7900XTX)
    assert reading.to_json() == {"used_mib": {"card0": 757.5}, "devices": {"card0": state(
        49.0, "junction", power=19.0, util=0.0, used=757.5)}}
    assert parse_rocm_smi(ROCM_MI250).devices == {"card0": state(
        44.0, "junction", 800.0, 1600.0, 91.0, 0.0)}
    assert parse_rocm_smi(ROCM_RX6700XT_602).devices["card0"] == state(
        47.0, "junction", 500.0, 96.0, None, 0.0, 1499.9)
    assert parse_rocm_smi(ROCM_2019).devices["card0"] == state(
        103.0, "junction", power=222.0)
    assert parse_rocm_smi(ROCM_780M).devices["card0"] == state(
        31.0, "edge", 800.0, 400.0, 7.222, 19.0)
    for text in ('{"system": {}}', "WARNING: No JSON data to report\n", "[]"):
        with pytest.raises(ValueError):
            parse_rocm_smi(text)


def test_parse_amd_smi_real_samples():
    assert parse_amd_smi(AMD_SMI_61_POWER).to_json() == {"used_mib": {}, "devices": {
        "gpu0": state(power=10.0)}}
    assert parse_amd_smi(AMD_SMI_72_USAGE).devices == {"gpu1": state(util=100.0)}
    assert parse_amd_smi(AMD_SMI_MI300X_SHAPED).devices == {"gpu0": state(
        42.0, "hotspot", 2107.0, 1230.0, 234.0, 100.0)}
    for text in ('{"gpu_data": []}', '{"gpu_data": {}}', "no json here"):
        with pytest.raises(ValueError):
            parse_amd_smi(text)


def test_parse_nvidia_smi_real_samples():
    h100 = state(59.0, "gpu", 1980.0, 2619.0, 631.95, 100.0, 19818.0)
    assert parse_nvidia_smi(NVIDIA_H100).to_json() == {"used_mib": {"gpu0": 19818.0},
                                                          "devices": {"gpu0": h100}}
    assert parse_nvidia_smi(NVIDIA_H100_MIG).devices["gpu0"]["util_pct"] is None
    assert parse_nvidia_smi(NVIDIA_TWO).devices == {
        "gpu0": state(60.0, "gpu", None, 5508.0, 106.56, 36.0, 2856.0),
        "gpu1": state(49.0, "gpu", None, 405.0, 5.68, 0.0, 4.0)}
    # without a header the columns follow the query (the H100's figures, in that order)
    assert parse_nvidia_smi("0, 59, 1980, 2619, 631.95, 100, 19818\n").devices == {
        "gpu0": h100}
    with pytest.raises(ValueError):
        parse_nvidia_smi("Failed to initialize NVML: Driver/library version mismatch\n")


def test_select_gpus_by_the_tools_index():
    reading = parse_nvidia_smi(NVIDIA_TWO)
    assert list(select_gpus(reading, (1,)).devices) == ["gpu1"]
    assert select_gpus(reading, (1,)).used_mib == {"gpu1": 4.0}
    assert select_gpus(reading, (1, 3)).note == "no GPU 3 in the tool's output"
    assert select_gpus(reading, ()) == reading
    assert select_gpus(GpuReading(error="x"), (0,)) == GpuReading(error="x")


@pytest.mark.parametrize("mask, kept", [
    ("0x0000000000000004", 4.0),
    ("0x0000000000000040", 64.0),
    ("0x0020000000000001", None),  # 2^53 + 1: `run` wrote it (exit 0), `compare` refused it
    ("0xFFFFFFFFFFFFFFFF", None),
    ("0x" + "F" * 400, None),
    ("0x", None),
    ("4", None),
])
def test_a_clock_event_mask_is_recorded_only_as_its_reader_reads_it(mask, kept):
    from router_latency.errors import checked_number
    from router_latency.gpu import NvidiaSamples
    reader = NvidiaSamples()
    reader.feed("timestamp, index, clocks_event_reasons.active", 0.0)
    _, _, figures = reader.feed(f"2026/12/04 16:54:32.751, 2, {mask}", 1.0)
    assert figures["reasons"] == kept
    checked_number(figures["reasons"], "reasons[0]", nullable=True)  # the reader takes it


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "warning: x\n" + '{"a":' * 5000])
def test_a_tools_output_nested_past_the_reader_is_no_reading(text):
    # amd-smi metric --json nested 5,000 deep: RecursionError from first_json, exit 1, no run
    # file; now the reading fails as any unreadable output does (ValueError: no figures)
    for parse in (parse_amd_smi, parse_rocm_smi):
        with pytest.raises(ValueError, match="nests deeper than Python's JSON reader goes"):
            parse(text)
