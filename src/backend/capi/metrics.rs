//! The TRITONSERVER_Metric* functions (exported, `exports.list`): custom metric families, their
//! arguments and metrics, kept in the server's custom-metrics registry and scraped with its own.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`,
//! out-pointers and buffers valid for the call as the API requires); callbacks are called with the
//! pointers the backend registered them with, which the API makes it keep valid until the request is
//! released.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{code_of, guarded, invalid, new_error, obj, obj_mut, put, take_box, text, Err};
use super::inprocess::{c_text, current};
use crate::error::{Error, Result};
use crate::model_api::custom_metrics::{MetricKind, MetricOp};
use crate::model_api::types::ParamValue;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

// ---- custom metrics ----

fn metrics_registry() -> Result<Arc<crate::model_api::custom_metrics::CustomMetrics>, Err> {
    current()
        .and_then(|s| s.api.as_ref().and_then(|a| a.custom_metrics()))
        .ok_or_else(|| new_error(code::UNAVAILABLE, "metrics are not available: the server is not running"))
}

fn failed(e: Error) -> Err {
    new_error(code_of(&e), &e.message)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricFamilyNew(
    family: *mut *mut MetricFamilyObj,
    kind: u32,
    name: *const c_char,
    description: *const c_char,
) -> Err {
    guarded("TRITONSERVER_MetricFamilyNew", || {
        if family.is_null() {
            return Err(invalid("family is null"));
        }
        let k = match kind {
            METRIC_COUNTER => MetricKind::Counter,
            METRIC_GAUGE => MetricKind::Gauge,
            METRIC_HISTOGRAM => MetricKind::Histogram,
            _ => return Err(invalid(&format!("metric kind {kind} does not exist"))),
        };
        let name = text(name, "name")?;
        let description = if description.is_null() { String::new() } else { c_text(description) };
        let registry = metrics_registry()?;
        let id = registry.family(name, &description, k).map_err(failed)?;
        let p = Box::into_raw(Box::new(MetricFamilyObj { id, kind, registry }));
        register(p as *const c_void, Kind::MetricFamily);
        put(family, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricFamilyDelete(family: *mut MetricFamilyObj) -> Err {
    guarded("TRITONSERVER_MetricFamilyDelete", || {
        let Some(f) = take_box(family, Kind::MetricFamily, "family")? else { return Ok(()) };
        f.registry.release(f.id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_GetMetricFamilyKind(family: *mut MetricFamilyObj, kind: *mut u32) -> Err {
    guarded("TRITONSERVER_GetMetricFamilyKind", || {
        put(kind, obj(family, Kind::MetricFamily, "family")?.kind);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsNew(args: *mut *mut MetricArgsObj) -> Err {
    guarded("TRITONSERVER_MetricArgsNew", || {
        if args.is_null() {
            return Err(invalid("args is null"));
        }
        let p = Box::into_raw(Box::<MetricArgsObj>::default());
        register(p as *const c_void, Kind::MetricArgs);
        put(args, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsSetHistogram(
    args: *mut MetricArgsObj,
    buckets: *const f64,
    buckets_count: u64,
) -> Err {
    guarded("TRITONSERVER_MetricArgsSetHistogram", || {
        let a = obj_mut(args, Kind::MetricArgs, "args")?;
        if buckets.is_null() && buckets_count > 0 {
            return Err(invalid("buckets is null"));
        }
        if buckets_count > 1 << 16 {
            return Err(invalid(&format!("{buckets_count} histogram buckets are too many")));
        }
        a.buckets = Some(if buckets_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `buckets_count` readable doubles.
            unsafe { std::slice::from_raw_parts(buckets, buckets_count as usize) }.to_vec()
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricArgsDelete(args: *mut MetricArgsObj) -> Err {
    guarded("TRITONSERVER_MetricArgsDelete", || {
        drop(take_box(args, Kind::MetricArgs, "args")?);
        Ok(())
    })
}

fn new_metric(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
    buckets: Option<Vec<f64>>,
) -> Result<(), Err> {
    let f = obj(family, Kind::MetricFamily, "family")?;
    if metric.is_null() || (labels.is_null() && label_count > 0) {
        return Err(invalid("metric and labels must not be null"));
    }
    let mut map = BTreeMap::new();
    for i in 0..label_count as usize {
        // SAFETY: the backend passes `label_count` parameter pointers.
        let p = obj(unsafe { *labels.add(i) }, Kind::Parameter, "label")?;
        match &p.value {
            ParameterValue::Plain(ParamValue::String(v)) => {
                map.insert(p.name.clone(), v.clone());
            }
            _ => return Err(invalid(&format!("label '{}' must be a string parameter", p.name))),
        }
    }
    let id = f.registry.metric(f.id, map, buckets).map_err(failed)?;
    let p = Box::into_raw(Box::new(MetricObj { id, kind: f.kind, registry: f.registry.clone() }));
    register(p as *const c_void, Kind::Metric);
    put(metric, p);
    Ok(())
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricNew(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
) -> Err {
    guarded("TRITONSERVER_MetricNew", || new_metric(metric, family, labels, label_count, None))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricNewWithArgs(
    metric: *mut *mut MetricObj,
    family: *mut MetricFamilyObj,
    labels: *const *const ParameterObj,
    label_count: u64,
    args: *const MetricArgsObj,
) -> Err {
    guarded("TRITONSERVER_MetricNewWithArgs", || {
        let buckets = if args.is_null() { None } else { obj(args, Kind::MetricArgs, "args")?.buckets.clone() };
        new_metric(metric, family, labels, label_count, buckets)
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricDelete(metric: *mut MetricObj) -> Err {
    guarded("TRITONSERVER_MetricDelete", || {
        let Some(m) = take_box(metric, Kind::Metric, "metric")? else { return Ok(()) };
        m.registry.release(m.id);
        Ok(())
    })
}

/// Applies `op` when the metric's kind allows it (UNSUPPORTED otherwise, as Triton answers).
fn metric_op(metric: *mut MetricObj, allowed: &[u32], op: MetricOp) -> Result<(), Err> {
    let m = obj(metric, Kind::Metric, "metric")?;
    if !allowed.contains(&m.kind) {
        return Err(new_error(code::UNSUPPORTED, &format!("{op:?} is not supported on this kind of metric")));
    }
    m.registry.update(m.id, op).map_err(failed)
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricValue(metric: *mut MetricObj, value: *mut f64) -> Err {
    guarded("TRITONSERVER_MetricValue", || {
        let m = obj(metric, Kind::Metric, "metric")?;
        if m.kind == METRIC_HISTOGRAM {
            return Err(new_error(code::UNSUPPORTED, "a histogram has no single value"));
        }
        put(value, m.registry.value(m.id).map_err(failed)?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricIncrement(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricIncrement", || {
        metric_op(metric, &[METRIC_COUNTER, METRIC_GAUGE], MetricOp::Increment(value))
    })
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricSet(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricSet", || metric_op(metric, &[METRIC_GAUGE], MetricOp::Set(value)))
}

#[no_mangle]
pub extern "C" fn TRITONSERVER_MetricObserve(metric: *mut MetricObj, value: f64) -> Err {
    guarded("TRITONSERVER_MetricObserve", || metric_op(metric, &[METRIC_HISTOGRAM], MetricOp::Observe(value)))
}
