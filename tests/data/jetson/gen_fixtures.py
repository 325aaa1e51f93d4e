#!/usr/bin/env python3
"""Writes the Jetson sysfs fixture trees the GPU metrics tests read (src/platform/jetson.rs,
tests/python/test_gpu_metrics.py): only the files the reader uses, shaped like a Nano on JetPack 4.6, a
Xavier NX on JetPack 5 and an Orin Nano on JetPack 6, with fixed values. Run from anywhere; the trees
are committed."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def put(root: Path, rel: str, text: str | bytes):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text + "\n")


def link(root: Path, rel: str, target: str):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, p)


def devfreq(root: Path, device_dir: str, name: str, freq: int, linked: bool = True):
    """A devfreq entry under the device, linked from /sys/class/devfreq as the kernel does."""
    entry = f"{device_dir}/devfreq/{name}"
    put(root, f"{entry}/cur_freq", str(freq))
    put(root, f"{entry}/max_freq", str(freq))
    if linked:
        link(root, f"sys/class/devfreq/{name}", "../../" + entry[len("sys/"):])
        up = "../" * 3
        link(root, f"{entry}/device", up + Path(device_dir).name)


def zone(root: Path, n: int, kind: str, milli: int):
    put(root, f"sys/devices/virtual/thermal/thermal_zone{n}/type", kind)
    put(root, f"sys/devices/virtual/thermal/thermal_zone{n}/temp", str(milli))


def nano(root: Path):
    put(root, "etc/nv_tegra_release", "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64")
    put(root, "sys/devices/57000000.gpu/load", "427")
    devfreq(root, "sys/devices/57000000.gpu", "57000000.gpu", 921600000)
    zone(root, 0, "AO-therm", 38500)
    zone(root, 1, "CPU-therm", 31500)
    zone(root, 2, "GPU-therm", 30000)
    zone(root, 5, "thermal-fan-est", -256000)
    put(root, "sys/bus/i2c/devices/6-0040/name", "ina3221x")
    iio = "sys/bus/i2c/devices/6-0040/iio:device0"
    for n, (rail, mw) in enumerate([("POM_5V_IN", 3812), ("POM_5V_GPU", 1244), ("POM_5V_CPU", 826)]):
        put(root, f"{iio}/rail_name_{n}", rail)
        put(root, f"{iio}/in_power{n}_input", str(mw))
        put(root, f"{iio}/in_voltage{n}_input", "5000")
    put(root, "var/lib/nvpmodel/status", "pmode:0000")
    put(root, "etc/nvpmodel.conf", "< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=1 NAME=5W >")


def hwmon(root: Path, dev: str, n_hwmon: int, channels):
    put(root, f"sys/bus/i2c/devices/{dev}/name", "ina3221")
    base = f"sys/bus/i2c/devices/{dev}/hwmon/hwmon{n_hwmon}"
    for n, label, mv, ma in channels:
        put(root, f"{base}/in{n}_label", label)
        if mv is not None:
            put(root, f"{base}/in{n}_input", str(mv))
        if ma is not None:
            put(root, f"{base}/curr{n}_input", str(ma))


def xavier(root: Path):
    put(root, "etc/nv_tegra_release", "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64")
    put(root, "sys/devices/17000000.gv11b/load", "995")
    devfreq(root, "sys/devices/17000000.gv11b", "17000000.gv11b", 1109250000)
    put(root, "sys/class/devfreq/15340000.vic/cur_freq", "115200000")  # another engine's devfreq entry
    zone(root, 0, "GPU-therm", 41500)
    zone(root, 1, "CPU-therm", 43000)
    hwmon(root, "1-0040", 3, [(1, "VDD_IN", 5120, 960), (2, "VDD_CPU_GPU_CV", 5120, 240), (3, "NC", 0, 0),
                              (7, "sum of shunt voltages", 1000, None)])
    put(root, "var/lib/nvpmodel/status", "pmode:0008")
    put(root, "etc/nvpmodel.conf", "< POWER_MODEL ID=2 NAME=MODE_15W_6CORE >\n< POWER_MODEL ID=8 NAME=MODE_20W_6CORE >")


def orin(root: Path):
    put(root, "proc/device-tree/compatible", b"nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0")
    put(root, "sys/devices/platform/bus@0/17000000.gpu/load", "0")
    put(root, "sys/class/devfreq/17000000.gpu/cur_freq", "306000000")  # no device link: found by the load search
    zone(root, 0, "cpu-thermal", 46750)
    zone(root, 1, "gpu-thermal", 45500)
    hwmon(root, "1-0040", 1, [(1, "VDD_IN", 5056, 1328), (2, "VDD_CPU_GPU_CV", 5048, 144), (3, "VDD_SOC", 5048, 448)])
    # JetPack 5.1 and 6 append the fan mode to the status file.
    put(root, "var/lib/nvpmodel/status", "pmode:0002 fmode:quiet")
    put(root, "etc/nvpmodel.conf", "< POWER_MODEL ID=0 NAME=MAXN_SUPER >\n< POWER_MODEL ID=2 NAME=15W >")


def main():
    for name, make in (("nano-jp46", nano), ("xavier-jp5", xavier), ("orin-jp6", orin)):
        root = HERE / name
        shutil.rmtree(root, ignore_errors=True)
        make(root)
        print(f"wrote {root}")


if __name__ == "__main__":
    main()
