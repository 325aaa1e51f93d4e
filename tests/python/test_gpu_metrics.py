"""GPU metrics on /metrics: Jetson sysfs readings from the fixture trees under tests/data/jetson
(TRITONRS_SYSFS_ROOT points the reader at one), and nothing GPU-related on a machine with neither NVML
nor a Jetson (this one)."""

from __future__ import annotations

import re
import urllib.request

import pytest

from helpers import REPO_ROOT, copy_models

FIXTURES = REPO_ROOT / "tests/data/jetson"


def scrape(server) -> str:
    port = int(server.wait_for_log(r"Started Metrics Service at \S+:(\d+)").group(1))
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def start(start_server, repo, *args, root=None):
    env = {"TRITONRS_SYSFS_ROOT": str(root)} if root else None
    return start_server("--model-repository", copy_models(repo, "simple"), "--allow-metrics=true",
                        "--metrics-port", "0", "--metrics-address", "127.0.0.1", *args, env=env)


@pytest.mark.parametrize("board,expected", [
    ("nano-jp46", [
        'nv_gpu_utilization{gpu_uuid="jetson-57000000.gpu"} 0.427',
        'tritonrs_jetson_gpu_frequency_hertz{gpu_uuid="jetson-57000000.gpu"} 921600000',
        'tritonrs_jetson_temperature_celsius{zone="GPU-therm"} 30',
        'tritonrs_jetson_power_watts{rail="POM_5V_IN"} 3.812',
        'tritonrs_jetson_power_watts{rail="POM_5V_GPU"} 1.244',
        'tritonrs_jetson_nvpmodel_mode{id="0",name="MAXN"} 1',
    ]),
    ("xavier-jp5", [
        'nv_gpu_utilization{gpu_uuid="jetson-17000000.gv11b"} 0.995',
        'tritonrs_jetson_temperature_celsius{zone="CPU-therm"} 43',
        'tritonrs_jetson_nvpmodel_mode{id="8",name="MODE_20W_6CORE"} 1',
    ]),
    ("orin-jp6", [
        'nv_gpu_utilization{gpu_uuid="jetson-17000000.gpu"} 0',
        'tritonrs_jetson_gpu_frequency_hertz{gpu_uuid="jetson-17000000.gpu"} 306000000',
        'tritonrs_jetson_temperature_celsius{zone="gpu-thermal"} 45.5',
        'tritonrs_jetson_nvpmodel_mode{id="2",name="15W"} 1',
    ]),
])
def test_jetson_metrics_from_sysfs(start_server, repo, board, expected):
    text = scrape(start(start_server, repo, root=FIXTURES / board))
    lines = text.splitlines()
    for line in expected:
        assert line in lines, f"missing {line}:\n{text}"
    assert "# TYPE tritonrs_jetson_power_watts gauge" in lines
    # VDD_IN of the hwmon boards is volts times amps.
    if board == "orin-jp6":
        m = re.search(r'^tritonrs_jetson_power_watts\{rail="VDD_IN"\} (\S+)$', text, re.M)
        assert m and abs(float(m.group(1)) - 5.056 * 1.328) < 1e-6, text


def test_gpu_metrics_can_be_turned_off(start_server, repo):
    text = scrape(start(start_server, repo, "--allow-gpu-metrics=false", root=FIXTURES / "nano-jp46"))
    assert "nv_gpu_" not in text and "tritonrs_jetson_" not in text
    assert "nv_cpu_utilization" in text


def test_no_gpu_metrics_without_a_gpu(start_server, repo):
    s = start(start_server, repo)
    text = scrape(s)
    assert "nv_gpu_" not in text and "tritonrs_jetson_" not in text
    assert s.client().is_server_ready()
