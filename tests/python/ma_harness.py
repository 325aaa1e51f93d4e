"""NVIDIA Model Analyzer (triton-model-analyzer 1.58) in remote mode against a running server, and the
results of `tritonrs tune` in the same shape, for the differential test (test_tune_ma.py) and the
bench (benches/tune_vs_ma.py). Stdlib only; see ma_recipe.md for how Model Analyzer behaves and why
each setting below is there.

Model Analyzer runs from its own venv ($MA_BIN, else <repo>/.ma-venv/bin/model-analyzer, else
/tmp/ma-venv/bin/model-analyzer):

    python3 -m venv .ma-venv && .ma-venv/bin/pip install triton-model-analyzer==1.58.0

and needs perf_analyzer ($PERF_ANALYZER, else ~/.cache/anchors/bin/perf_analyzer). The server must
run with --model-control-mode=explicit and /metrics up: Model Analyzer applies each variant with
POST /v2/repository/models/<model>/load {"parameters": {"config": "<json>"}} under the model's own
name.

Both sides come back as a list of variants, best first:
    {"name", "is_default", "instance_count", "max_batch_size", "dynamic_batching",
     "measurements": [{"concurrency", "throughput", "p99_ms", "satisfies"}],
     "best_throughput", "best_concurrency", "p99_ms", "satisfies_constraints"}
with the settings read from each variant's config.pbtxt (Model Analyzer's output model repository,
tritonrs's --export folder): the two tools number their variants differently, so compare settings.

By hand, against a server that is already running:

    python3 tests/python/ma_harness.py --server-http 18000 --server-grpc 18001 --metrics-port 18002 \
        --model add16 --concurrency 1,2 --out /tmp/ma-out --candidates '[{"instance_count": 2}]'
"""

from __future__ import annotations

import argparse
import csv
import glob
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def ma_bin() -> Path | None:
    """The model-analyzer executable ($MA_BIN when set, else the first venv that has one), or None."""
    places = [os.environ["MA_BIN"]] if os.environ.get("MA_BIN") else [
        REPO_ROOT / ".ma-venv/bin/model-analyzer", "/tmp/ma-venv/bin/model-analyzer"]
    return next((Path(p) for p in places if Path(p).is_file() and os.access(p, os.X_OK)), None)


def perf_analyzer() -> Path | None:
    p = Path(os.environ.get("PERF_ANALYZER", Path.home() / ".cache/anchors/bin/perf_analyzer"))
    return p if p.is_file() and os.access(p, os.X_OK) else None


def missing() -> str | None:
    """Why Model Analyzer cannot run here, or None."""
    if ma_bin() is None:
        return ("model-analyzer not found ($MA_BIN, <repo>/.ma-venv/bin/model-analyzer, /tmp/ma-venv/bin/"
                "model-analyzer); install: python3 -m venv .ma-venv && .ma-venv/bin/pip install "
                "triton-model-analyzer==1.58.0")
    if perf_analyzer() is None:
        return "perf_analyzer not found ($PERF_ANALYZER, default ~/.cache/anchors/bin/perf_analyzer)"
    return None


def log(msg: str) -> None:
    print(f"[ma] {msg}", file=sys.stderr, flush=True)


# ---- the server's repository API ------------------------------------------------------------------


def http(method: str, url: str, body=None, timeout: float = 30) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def model_state(base: str, model: str) -> str | None:
    """READY / UNAVAILABLE / LOADING / UNLOADING, or None when the model is not in the index."""
    code, text = http("POST", f"{base}/v2/repository/index", {})
    if code != 200:
        raise RuntimeError(f"repository index failed ({code}): {text}")
    for entry in json.loads(text):
        if entry.get("name") == model:
            return entry.get("state") or "UNAVAILABLE"
    return None


def unload_and_wait(base: str, model: str, timeout: float = 60) -> None:
    """Model Analyzer never unloads at the end, and Triton 2.51 keeps a config override across a later
    plain load, so the next run's `_config_default` would be the previous run's last variant: unload
    before each run."""
    if model_state(base, model) in (None, "UNAVAILABLE"):
        return
    http("POST", f"{base}/v2/repository/models/{model}/unload", {})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if model_state(base, model) in (None, "UNAVAILABLE"):
            return
        time.sleep(0.2)
    raise RuntimeError(f"model {model} did not unload within {timeout}s")


# ---- candidates -> model_config_parameters -------------------------------------------------------


def norm_candidate(c: dict) -> dict:
    """instance_count (KIND_CPU), max_batch_size and dynamic_batching (true = on with defaults, or an
    object such as {"max_queue_delay_microseconds": 100}); a key left out keeps the model's value."""
    db = c.get("dynamic_batching")
    if db is True:
        db = {}
    elif db is False:
        db = None
    elif db is not None and not isinstance(db, dict):
        raise ValueError(f"dynamic_batching must be bool or object: {c}")
    return {"instance_count": c.get("instance_count"), "max_batch_size": c.get("max_batch_size"),
            "dynamic_batching": db}


def _sweep(value):
    """Model Analyzer sweeps every leaf list: wrap scalars in one-element lists."""
    if isinstance(value, dict):
        return {k: _sweep(v) for k, v in value.items()}
    return value if isinstance(value, list) else [value]


def _parameters(counts, mbss, db) -> dict:
    p = {}
    if counts != [None]:
        p["instance_group"] = [[{"kind": "KIND_CPU", "count": sorted(counts)}]]
    if mbss != [None]:
        p["max_batch_size"] = sorted(mbss)
    if db is not None:
        p["dynamic_batching"] = _sweep(db) if db else {}  # {}: "Enabling dynamic_batching"
    if not p:
        raise ValueError("a candidate must set at least one of instance_count, max_batch_size, dynamic_batching")
    return p


def plan_runs(cands: list[dict]) -> list[dict]:
    """model_config_parameters for each Model Analyzer invocation. MA only sweeps cross products (and
    cannot sweep dynamic batching to "absent"), so candidates that are a cross product of instance
    count x max batch size with one dynamic batching setting take one run; anything else takes one
    run per candidate, all sharing one checkpoint (MA keeps names and measurements across them)."""
    counts = sorted({c["instance_count"] for c in cands}, key=lambda x: -1 if x is None else x)
    mbss = sorted({c["max_batch_size"] for c in cands}, key=lambda x: -1 if x is None else x)
    dbs = {json.dumps(c["dynamic_batching"], sort_keys=True) for c in cands}
    keys = {(c["instance_count"], c["max_batch_size"]) for c in cands}
    product = (len(dbs) == 1 and (None not in counts or counts == [None]) and (None not in mbss or mbss == [None])
               and keys == set(itertools.product(counts, mbss)) and len(keys) == len(cands))
    if product:
        return [_parameters(counts, mbss, cands[0]["dynamic_batching"])]
    return [_parameters([c["instance_count"]], [c["max_batch_size"]], c["dynamic_batching"]) for c in cands]


# ---- running Model Analyzer -----------------------------------------------------------------------


def ma_config(model: str, out: Path, idx: int, *, host: str, http_port: int, grpc_port: int, metrics_port: int,
              parameters: dict | None = None, quick: dict | None = None, concurrency: list[int] | None = None,
              protocol: str = "grpc", measurement_interval_ms: int = 500, stability_percentage: int = 50,
              max_trials: int = 5, max_auto_adjusts: int = 2, pa_timeout: int = 60,
              objective: str = "perf_throughput", max_p99_ms: float | None = None,
              min_throughput: float | None = None, local: dict | None = None) -> dict:
    """One `model-analyzer profile` configuration: fixed candidates (`parameters`, MA's
    model_config_parameters, with run_config_search_disable) or quick search (`quick`: extra
    run_config_search_* keys such as max_instance_count). Remote mode measures the server at the
    given ports; `local` ({"repository", "server_path"}) is MA's default launch mode instead: MA starts
    the server at `server_path` itself on those ports, and restarts it for every variant."""
    cfg = {
        "triton_launch_mode": "remote" if local is None else "local",
        "client_protocol": protocol,
        "triton_http_endpoint": f"{host}:{http_port}",
        "triton_grpc_endpoint": f"{host}:{grpc_port}",
        "triton_metrics_url": f"http://{host}:{metrics_port}/metrics",  # must answer 200
        "perf_analyzer_path": str(perf_analyzer()),
        "perf_analyzer_timeout": pa_timeout,
        "perf_analyzer_max_auto_adjusts": max_auto_adjusts,
        "dcgm_disable": True,
        "gpus": [],
        "duration_seconds": 1,  # the server-only metrics phase (default 3 s)
        "export_path": str(out / "export"),
        "checkpoint_directory": str(out / "ckpt"),  # default ./checkpoints is reused across runs
        # one per invocation: `override` rmtree's the folder first, and without it MA refuses it
        "output_model_repository_path": str(out / "output_model_repository" / f"run_{idx}"),
        "override_output_model_repository": True,
        "skip_summary_reports": False,  # true also skips the CSV
        "skip_detailed_reports": True,
        "objectives": {objective: 10},
        "perf_analyzer_flags": {
            "measurement-mode": "time_windows",
            "measurement-interval": measurement_interval_ms,
            "stability-percentage": stability_percentage,
            "max-trials": max_trials,
        },
    }
    if local is not None:
        # MA refuses dcgm_disable outside remote mode; without a GPU (numba finds no CUDA) it starts no
        # DCGM monitor anyway.
        del cfg["dcgm_disable"]
        cfg.update({"model_repository": str(local["repository"]), "triton_server_path": str(local["server_path"]),
                    "triton_output_path": str(out / f"server_{idx}.log")})
    spec: dict = {"cpu_only": True}  # remote mode otherwise proposes KIND_GPU variants
    if quick is not None:
        cfg["run_config_search_mode"] = "quick"
        cfg.update({f"run_config_search_{k}": v for k, v in quick.items()})
    else:
        cfg["run_config_search_disable"] = True
        spec["model_config_parameters"] = parameters
    if concurrency:
        spec["parameters"] = {"concurrency": list(concurrency), "batch_sizes": [1]}
    cfg["profile_models"] = {model: spec}
    constraints = {}
    if max_p99_ms is not None:
        constraints["perf_latency_p99"] = {"max": max_p99_ms}
    if min_throughput is not None:
        constraints["perf_throughput"] = {"min": min_throughput}
    if constraints:
        cfg["constraints"] = constraints
    return cfg


def run_ma(cfg: dict, out: Path, idx: int, timeout: float = 900) -> dict:
    path = out / f"ma_{idx}.yaml"
    path.write_text(json.dumps(cfg, indent=2))  # JSON is YAML (MA reads it with yaml.safe_load)
    logf = out / f"ma_{idx}.log"
    cmd = [str(ma_bin()), "profile", "-f", str(path)]
    t0 = time.monotonic()
    with open(logf, "w") as lf:
        # cwd=out: perf_analyzer writes its -f <model>-results.csv into MA's working directory
        p = subprocess.run(cmd, cwd=out, stdout=lf, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.monotonic() - t0
    text = logf.read_text()
    if p.returncode != 0:
        raise RuntimeError(f"model-analyzer exited {p.returncode}; tail of {logf}:\n{text[-3000:]}")
    return {"yaml": str(path), "log": str(logf), "wall_s": round(wall, 2), "problems": problems(text)}


def problems(log_text: str) -> list[str]:
    """Lines of MA's log that mean a request went wrong or perf_analyzer could not stabilise (not the
    GPU-less warnings, nor "Existing measurement found ... Skipping", which quick search's sweep
    prints for a point it already has)."""
    bad = re.compile(r"Traceback|perf_analyzer failed|PA_FAIL|failed to load|load failed|"
                     r"measurement window is too small|error", re.I)
    return [line for line in log_text.splitlines() if bad.search(line)]


def profile_local(model: str, out: Path, *, repository: Path, server_path: Path, quick: dict,
                  timeout: float = 900, **kw) -> dict:
    """Model Analyzer's quick search in its default launch mode: it starts the server at `server_path`
    itself (on free loopback ports) and restarts it for every variant, as it does on a device."""
    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "output_model_repository").mkdir(parents=True)
    ports = [free_port() for _ in range(3)]
    cfg = ma_config(model, out, 0, host="127.0.0.1", http_port=ports[0], grpc_port=ports[1], metrics_port=ports[2],
                    quick=quick, local={"repository": Path(repository).resolve(), "server_path": server_path}, **kw)
    run = run_ma(cfg, out, 0, timeout)
    result = collect(out, model)
    result.update(wall_s=run["wall_s"], runs=[run])
    return result


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile(model: str, out: Path, *, host: str = "127.0.0.1", http_port: int, grpc_port: int, metrics_port: int,
            candidates: list[dict] | None = None, quick: dict | None = None, restore: bool = True,
            timeout: float = 900, **kw) -> dict:
    """Runs Model Analyzer against the server (fixed `candidates`, or `quick` search) and returns
    collect()'s result plus wall_s (all MA runs, not the unload/restore around them) and runs."""
    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "output_model_repository").mkdir(parents=True)  # MA os.mkdir's the run_<i> folders
    base = f"http://{host}:{http_port}"
    before = model_state(base, model)
    if before is None:
        raise RuntimeError(f"model {model} is not in the server's repository index")
    plans = [None] if quick is not None else plan_runs([norm_candidate(c) for c in candidates or []])
    runs, wall = [], 0.0
    try:
        for i, params in enumerate(plans):
            unload_and_wait(base, model)
            cfg = ma_config(model, out, i, host=host, http_port=http_port, grpc_port=grpc_port,
                            metrics_port=metrics_port, parameters=params, quick=quick, **kw)
            runs.append(run_ma(cfg, out, i, timeout))
            wall += runs[-1]["wall_s"]
    finally:
        if restore:  # drop MA's last override; reload from the repository if it was loaded
            unload_and_wait(base, model)
            if before == "READY":
                http("POST", f"{base}/v2/repository/models/{model}/load", {}, timeout=120)
    result = collect(out, model)
    result.update(wall_s=round(wall, 2), runs=runs)
    return result


# ---- results ----------------------------------------------------------------------------------------


def parse_pbtxt(path: Path) -> dict:
    """instance count, max_batch_size and whether dynamic batching is on, from a config.pbtxt in either
    tool's text format (`instance_group { ... }` or `instance_group: [{ ... }]`)."""
    t = Path(path).read_text()
    mbs = re.search(r"^max_batch_size:\s*(\d+)", t, re.M)
    count = 0
    for m in re.finditer(r"^instance_group\s*:?\s*\[?\s*\{", t, re.M):
        # every group of this field, up to the bracket that closes it
        depth, i, groups = 0, m.start(), ""
        while i < len(t):
            ch = t[i]
            depth += ch in "[{"
            depth -= ch in "]}"
            groups += ch
            i += 1
            if depth == 0 and ch in "]}":
                break
        count += sum(int(c) for c in re.findall(r"\bcount:\s*(\d+)", groups)) or 1
    return {
        "instance_count": count or 1,
        "max_batch_size": int(mbs.group(1)) if mbs else 0,
        "dynamic_batching": re.search(r"^dynamic_batching\s*:?\s*\{", t, re.M) is not None,
    }


def _precise(ckpt_dir: Path, model: str) -> dict:
    """(variant, concurrency) -> throughput and p99 at full precision from MA's newest checkpoint (the
    CSV rounds p99 to 0.1 ms)."""
    ckpts = glob.glob(str(ckpt_dir / "*.ckpt"))
    if not ckpts:
        return {}
    d = json.loads(Path(max(ckpts, key=lambda p: int(Path(p).stem))).read_text())
    res = {}
    for variant, entry in d.get("ResultManager.results", {}).get("_results", {}).get(model, {}).items():
        if not isinstance(entry, list) or len(entry) < 2:
            continue
        for rcm in entry[1].values():
            for mcm in rcm.get("_model_config_measurements", []):
                conc = mcm.get("_model_specific_pa_params", {}).get("concurrency-range")
                vals = {k: v["_value"] for k, v in mcm.get("_non_gpu_data", [])}
                if conc is not None:
                    res[(variant, int(conc))] = {"throughput": vals.get("perf_throughput"),
                                                 "p99_ms": vals.get("perf_latency_p99")}
    return res


def variants_from_csv(csv_path: Path, config_of, precise: dict | None = None) -> list[dict]:
    """Variants in the CSV's order (both tools write configs best first), each with its settings from
    `config_of(name)` (a config.pbtxt path or None) and its measurements."""
    precise = precise or {}
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("Model")]
    variants: dict[str, dict] = {}
    for r in rows:
        name, conc = r["Model Config Path"], int(r["Concurrency"])
        p = precise.get((name, conc), {})
        m = {"concurrency": conc,
             "throughput": p.get("throughput") or float(r["Throughput (infer/sec)"]),
             "p99_ms": p.get("p99_ms") or float(r["p99 Latency (ms)"]),
             "satisfies": r["Satisfies Constraints"] == "Yes"}
        if name not in variants:
            path = config_of(name)
            info = parse_pbtxt(path) if path else {}
            group = re.match(r"(\d+):", r.get("Instance Group") or "")
            variants[name] = {
                "name": name,
                "is_default": name.endswith("_config_default"),
                "instance_count": info.get("instance_count", int(group.group(1)) if group else None),
                "max_batch_size": info.get("max_batch_size", int(r["Max Batch Size"] or 0)),
                "dynamic_batching": info.get("dynamic_batching"),
                "config_pbtxt": str(path) if path else None,
                "measurements": [],
            }
        variants[name]["measurements"].append(m)
    for v in variants.values():
        ms = v["measurements"]
        passing = [m for m in ms if m["satisfies"]]
        best = max(passing or ms, key=lambda m: m["throughput"])
        v.update(best_throughput=best["throughput"], p99_ms=best["p99_ms"], best_concurrency=best["concurrency"],
                 satisfies_constraints=bool(passing))
        ms.sort(key=lambda m: m["concurrency"])
    return list(variants.values())


def collect(out: Path, model: str) -> dict:
    """Model Analyzer's results in `out`: variants best first and `best` (its top variant, the default
    included). MA's CSV ranks a config with no passing point by its best failing one, so it can sit
    above passing configs; MA's own top_n_results (what its reports use) puts passing configs first,
    and so does this. (The summary report's headline can name a failing default: not an oracle.)"""
    csv_path = out / "export" / "results" / "metrics-model-inference.csv"
    if not csv_path.exists():
        raise RuntimeError(f"Model Analyzer wrote no {csv_path}")
    repos = sorted((out / "output_model_repository").glob("run_*"), key=lambda p: -int(p.name.split("_")[1]))

    def config_of(name):
        return next((r / name / "config.pbtxt" for r in repos if (r / name / "config.pbtxt").exists()), None)

    ranked = variants_from_csv(csv_path, config_of, _precise(out / "ckpt", model))
    top = [v for v in ranked if v["satisfies_constraints"]] + [v for v in ranked if not v["satisfies_constraints"]]
    return {"tool": "model-analyzer", "variants": top, "best": top[0] if top else None, "csv": str(csv_path)}


def tune_result(stdout: str, out_dir: Path, export_dir: Path, model: str) -> dict:
    """`tritonrs tune --output-dir OUT --export EXPORT`'s results in the same shape; `best` is the
    variant its `<model>: best is NAME (...)` line names."""
    m = re.search(rf"^{re.escape(model)}: best is (\S+) \((.*?)\) at concurrency", stdout, re.M)
    variants = variants_from_csv(
        Path(out_dir) / "metrics-model-inference.csv",
        lambda n: (Path(export_dir) / n / "config.pbtxt") if (Path(export_dir) / n / "config.pbtxt").exists() else None)
    best = next((v for v in variants if m and v["name"] == m.group(1)), None)
    return {"tool": "tritonrs tune", "variants": variants, "best": best,
            "csv": str(Path(out_dir) / "metrics-model-inference.csv")}


def settings(v: dict | None, keys=("instance_count", "dynamic_batching")) -> tuple | None:
    return None if v is None else tuple(v[k] for k in keys)


def describe(v: dict | None) -> str:
    """`2xCPU mbs=8 db` plus what was measured at each concurrency."""
    if v is None:
        return "(none)"
    s = f"{v['instance_count']}xCPU mbs={v['max_batch_size']}{' db' if v['dynamic_batching'] else ''}"
    pts = ", ".join(f"c={m['concurrency']}: {m['throughput']:.1f}/s p99 {m['p99_ms']:.1f} ms"
                    f"{'' if m['satisfies'] else ' (fails constraints)'}" for m in v["measurements"])
    return f"{s} [{v['name']}] {pts}"


def table(result: dict) -> str:
    return "\n".join(f"  {'*' if v is result['best'] else ' '} {describe(v)}" for v in result["variants"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server-http", type=int, required=True)
    ap.add_argument("--server-grpc", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--candidates", help="JSON list of {instance_count, max_batch_size, dynamic_batching}")
    ap.add_argument("--quick", help='quick search with these run_config_search_* bounds, JSON, e.g. '
                                    '{"max_instance_count": 2}')
    ap.add_argument("--concurrency", default="", help="e.g. 1,2 (default: MA's own sweep)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--max-p99-ms", type=float)
    ap.add_argument("--min-throughput", type=float)
    a = ap.parse_args()
    if (a.candidates is None) == (a.quick is None):
        ap.error("give --candidates or --quick")
    if missing():
        raise SystemExit(missing())
    r = profile(a.model, Path(a.out), host=a.host, http_port=a.server_http, grpc_port=a.server_grpc,
                metrics_port=a.metrics_port, candidates=a.candidates and json.loads(a.candidates),
                quick=a.quick and json.loads(a.quick),
                concurrency=[int(c) for c in a.concurrency.split(",") if c], protocol=a.protocol,
                max_p99_ms=a.max_p99_ms, min_throughput=a.min_throughput)
    print(table(r), file=sys.stderr)
    r["best"] = r["best"]["name"] if r["best"] else None
    print(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
