//! The rest of TRITONBACKEND API 1.19 that a backend may import: the server and memory manager it
//! may use, buffer attributes of inputs and outputs, implicit state, host policy, backend
//! attributes, response inspection, and what a backend reports (statistics, memory usage).
//!
//! Contract for every `unsafe` block: as in `guard.rs`; memory-manager blocks are freed only when
//! the manager's own table says it allocated them, with the layout it recorded.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, new_error, obj, obj_mut, put, take_box, text, Err};
use crate::model_api::types::Tensor;
use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

#[no_mangle]
pub extern "C" fn TRITONSERVER_ApiVersion(major: *mut u32, minor: *mut u32) -> Err {
    guarded("TRITONSERVER_ApiVersion", || {
        put(major, SERVER_API_MAJOR);
        put(minor, SERVER_API_MINOR);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelServer(model: *mut ModelObj, server: *mut *mut ServerObj) -> Err {
    guarded("TRITONBACKEND_ModelServer", || {
        let m = obj(model, Kind::Model, "model")?;
        put(server, Arc::as_ptr(&m.server) as *mut ServerObj);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceHostPolicy(
    instance: *mut InstanceObj,
    policy: *mut *mut MessageObj,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceHostPolicy", || {
        let i = obj(instance, Kind::Instance, "instance")?;
        if policy.is_null() {
            return Err(invalid("host_policy is null"));
        }
        // No --host-policy settings: the instance's policy (named as Triton names it) is empty.
        let name = if i.kind == INSTANCEGROUPKIND_GPU { format!("gpu_{}", i.device_id) } else { "cpu".to_string() };
        put(policy, super::guard::new_message(&serde_json::json!({ name: {} }).to_string()));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceProfileName(
    instance: *mut InstanceObj,
    index: u32,
    name: *mut *const c_char,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceProfileName", || {
        obj(instance, Kind::Instance, "instance")?;
        put(name, std::ptr::null());
        Err(invalid(&format!("profile index {index} is out of range (the instance has no profiles)")))
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(
    instance: *mut InstanceObj,
    index: u32,
    kind: *mut *const c_char,
    id: *mut i64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceSecondaryDeviceProperties", || {
        obj(instance, Kind::Instance, "instance")?;
        put(kind, std::ptr::null());
        put(id, 0);
        Err(invalid(&format!("secondary device index {index} is out of range (the instance has none)")))
    })
}

// ---- the memory manager: host memory for backends ----

/// The one `TRITONBACKEND_MemoryManager`; its address is the handle.
static MANAGER: u8 = 0;

/// Blocks the manager handed out: address -> layout.
static BLOCKS: parking_lot::Mutex<Option<HashMap<usize, Layout>>> = parking_lot::Mutex::new(None);

fn manager_ptr() -> *const c_void {
    &MANAGER as *const u8 as *const c_void
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendMemoryManager(backend: *mut BackendObj, manager: *mut *mut c_void) -> Err {
    guarded("TRITONBACKEND_BackendMemoryManager", || {
        obj(backend, Kind::Backend, "backend")?;
        register(manager_ptr(), Kind::MemoryManager);
        put(manager, manager_ptr() as *mut c_void);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_MemoryManagerAllocate(
    manager: *mut c_void,
    buffer: *mut *mut c_void,
    memory_type: u32,
    _memory_type_id: i64,
    byte_size: u64,
) -> Err {
    guarded("TRITONBACKEND_MemoryManagerAllocate", || {
        if !is_live(manager, Kind::MemoryManager) {
            return Err(invalid("manager is not the backend memory manager"));
        }
        if buffer.is_null() {
            return Err(invalid("buffer is null"));
        }
        if memory_type == MEMORY_GPU {
            return Err(new_error(
                code::UNSUPPORTED,
                "tritonrs's backend memory manager allocates host memory only (CPU and CPU_PINNED)",
            ));
        }
        let size = usize::try_from(byte_size).map_err(|_| invalid("byte_size is too large"))?;
        if size > MAX_ALLOCATION {
            return Err(new_error(code::UNAVAILABLE, &format!("{size} bytes are more than the manager gives at once")));
        }
        let layout = Layout::from_size_align(size.max(1), 64).map_err(|_| invalid("byte_size is too large"))?;
        // SAFETY: a layout of non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(new_error(code::UNAVAILABLE, &format!("out of host memory allocating {size} bytes")));
        }
        BLOCKS.lock().get_or_insert_with(HashMap::new).insert(p as usize, layout);
        put(buffer, p.cast());
        Ok(())
    })
}

/// The largest block the memory manager hands out (4 GiB).
const MAX_ALLOCATION: usize = 4 << 30;

#[no_mangle]
pub extern "C" fn TRITONBACKEND_MemoryManagerFree(
    manager: *mut c_void,
    buffer: *mut c_void,
    _memory_type: u32,
    _memory_type_id: i64,
) -> Err {
    guarded("TRITONBACKEND_MemoryManagerFree", || {
        if !is_live(manager, Kind::MemoryManager) {
            return Err(invalid("manager is not the backend memory manager"));
        }
        let layout = BLOCKS
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&(buffer as usize)))
            .ok_or_else(|| invalid("buffer was not allocated by the memory manager (or was freed already)"))?;
        // SAFETY: allocated by TRITONBACKEND_MemoryManagerAllocate with this layout (its table said
        // so, and the entry is gone now, so it is freed once).
        unsafe { std::alloc::dealloc(buffer.cast(), layout) };
        Ok(())
    })
}

// ---- buffer attributes of inputs and outputs ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InputBufferAttributes(
    input: *mut InputObj,
    index: u32,
    buffer: *mut *const c_void,
    attributes: *mut *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONBACKEND_InputBufferAttributes", || {
        let i = obj(input, Kind::Input, "input")?;
        if index != 0 || i.data.is_empty() {
            return Err(invalid(&format!("input buffer index {index} is out of range")));
        }
        let a = &i.attributes as *const BufferAttributesObj as *mut BufferAttributesObj;
        register(a as *const c_void, Kind::BufferAttributes);
        put(buffer, i.data.as_ptr().cast());
        put(attributes, a);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_OutputBufferAttributes(
    output: *mut OutputObj,
    attributes: *mut *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONBACKEND_OutputBufferAttributes", || {
        let o = obj(output, Kind::Output, "output")?;
        let a = &o.attributes as *const BufferAttributesObj as *mut BufferAttributesObj;
        register(a as *const c_void, Kind::BufferAttributes);
        put(attributes, a);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestOutputBufferProperties(
    request: *mut RequestObj,
    name: *const c_char,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> Err {
    guarded("TRITONBACKEND_RequestOutputBufferProperties", || {
        obj(request, Kind::Request, "request")?;
        if !name.is_null() {
            text(name, "name")?;
        }
        // Output buffers are allocated when the backend asks (TRITONBACKEND_OutputBuffer), in host
        // memory; none is known in advance.
        put(byte_size, 0);
        put(memory_type, MEMORY_CPU);
        put(memory_type_id, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_RequestTrace(request: *mut RequestObj, trace: *mut *mut c_void) -> Err {
    guarded("TRITONBACKEND_RequestTrace", || {
        obj(request, Kind::Request, "request")?;
        // tritonrs traces requests itself; backends get no trace object.
        put(trace, std::ptr::null_mut());
        Ok(())
    })
}

// ---- inspecting a response under construction ----

fn response_output(o: &OutputObj, datatype: *mut u32, shape: *mut *const i64, dim_count: *mut u64) {
    put(datatype, datatype_to_c(o.datatype));
    put(shape, o.shape.as_ptr());
    put(dim_count, o.shape.len() as u64);
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InferenceResponseOutput(
    response: *mut ResponseObj,
    index: u32,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
) -> Err {
    guarded("TRITONBACKEND_InferenceResponseOutput", || {
        let r = obj(response, Kind::Response, "response")?;
        let o = r
            .outputs
            .get(index as usize)
            .ok_or_else(|| invalid(&format!("output index {index} is out of range ({})", r.outputs.len())))?;
        put(name, o.c_name.as_ptr());
        response_output(o, datatype, shape, dim_count);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_InferenceResponseOutputByName(
    response: *mut ResponseObj,
    name: *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
) -> Err {
    guarded("TRITONBACKEND_InferenceResponseOutputByName", || {
        let r = obj(response, Kind::Response, "response")?;
        let name = text(name, "name")?;
        let o = r
            .outputs
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| new_error(code::NOT_FOUND, &format!("the response has no output '{name}'")))?;
        response_output(o, datatype, shape, dim_count);
        Ok(())
    })
}

// ---- implicit state ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_StateNew(
    state: *mut *mut StateObj,
    request: *mut RequestObj,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dims_count: u32,
) -> Err {
    guarded("TRITONBACKEND_StateNew", || {
        let r = obj(request, Kind::Request, "request")?;
        let name = text(name, "name")?.to_string();
        if state.is_null() {
            return Err(invalid("state is null"));
        }
        if !r.state_outputs.contains(&name) {
            return Err(invalid(&format!(
                "'{name}' is not an implicit state of the model (sequence_batching.state output_name)"
            )));
        }
        let dt = datatype_from_c(datatype)
            .ok_or_else(|| invalid(&format!("state '{name}' has no valid datatype ({datatype})")))?;
        if (shape.is_null() && dims_count > 0) || dims_count > 64 {
            return Err(invalid(&format!("state '{name}' has a bad shape")));
        }
        let dims = if dims_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `dims_count` readable dims at `shape`.
            unsafe { std::slice::from_raw_parts(shape, dims_count as usize) }.to_vec()
        };
        let s = Box::new(StateObj {
            completion: r.completion.clone(),
            name,
            datatype: dt,
            shape: dims,
            buffer: Vec::new(),
            attributes: BufferAttributesObj::host(0),
        });
        let p = &*s as *const StateObj as *mut StateObj;
        // The request owns its states (the API has no StateDelete); they go with it.
        r.states.lock().push(s);
        register(p as *const c_void, Kind::State);
        put(state, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_StateBuffer(
    state: *mut StateObj,
    buffer: *mut *mut c_void,
    byte_size: u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> Err {
    guarded("TRITONBACKEND_StateBuffer", || {
        let s = obj_mut(state, Kind::State, "state")?;
        let size = usize::try_from(byte_size).map_err(|_| invalid("the buffer is too large"))?;
        if size > MAX_ALLOCATION {
            return Err(new_error(code::UNAVAILABLE, &format!("a state buffer of {size} bytes is too large")));
        }
        s.buffer = vec![0u8; size];
        s.attributes = BufferAttributesObj::host(size);
        put(buffer, s.buffer.as_mut_ptr().cast());
        put(memory_type, MEMORY_CPU);
        put(memory_type_id, 0);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_StateBufferAttributes(
    state: *mut StateObj,
    attributes: *mut *mut BufferAttributesObj,
) -> Err {
    guarded("TRITONBACKEND_StateBufferAttributes", || {
        let s = obj(state, Kind::State, "state")?;
        let a = &s.attributes as *const BufferAttributesObj as *mut BufferAttributesObj;
        register(a as *const c_void, Kind::BufferAttributes);
        put(attributes, a);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_StateUpdate(state: *mut StateObj) -> Err {
    guarded("TRITONBACKEND_StateUpdate", || {
        let s = obj(state, Kind::State, "state")?;
        let t = Tensor::new(s.name.clone(), s.datatype, s.shape.clone(), bytes::Bytes::copy_from_slice(&s.buffer));
        let mut p = s.completion.progress.lock();
        p.states.retain(|o| o.name != t.name);
        p.states.push(t);
        Ok(())
    })
}

// ---- backend attributes ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    attributes: *mut BackendAttributeObj,
    kind: u32,
    count: u64,
    device_ids: *const u64,
    id_count: u64,
) -> Err {
    guarded("TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup", || {
        let a = obj_mut(attributes, Kind::BackendAttribute, "backend_attributes")?;
        if (device_ids.is_null() && id_count > 0) || id_count > 1024 {
            return Err(invalid("bad device ids"));
        }
        let ids = if id_count == 0 {
            Vec::new()
        } else {
            // SAFETY: the backend passes `id_count` readable ids.
            unsafe { std::slice::from_raw_parts(device_ids, id_count as usize) }.to_vec()
        };
        a.preferred_groups.push((kind, count, ids));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(
    attributes: *mut BackendAttributeObj,
    enabled: bool,
) -> Err {
    guarded("TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading", || {
        obj_mut(attributes, Kind::BackendAttribute, "backend_attributes")?.parallel_instance_loading = enabled;
        Ok(())
    })
}

// ---- what a backend reports ----

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceReportMemoryUsage(
    instance: *mut InstanceObj,
    usage: *mut *mut BufferAttributesObj,
    usage_size: u32,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceReportMemoryUsage", || {
        let model = obj(obj(instance, Kind::Instance, "instance")?.model, Kind::Model, "the instance's model")?;
        report_usage(&model.memory, instance as usize, usage, usage_size)
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelReportMemoryUsage(
    model: *mut ModelObj,
    usage: *mut *mut BufferAttributesObj,
    usage_size: u32,
) -> Err {
    guarded("TRITONBACKEND_ModelReportMemoryUsage", || {
        let m = obj(model, Kind::Model, "model")?;
        report_usage(&m.memory, model as usize, usage, usage_size)
    })
}

/// Sets `reporter`'s memory-usage report in the model's `memory_usage` statistics (replacing its last
/// one, as tritonserver does): every entry is checked first, so a bad one changes nothing.
fn report_usage(
    to: &crate::model_api::MemoryUsage,
    reporter: usize,
    usage: *mut *mut BufferAttributesObj,
    n: u32,
) -> Result<(), Err> {
    use crate::model_api::MemoryKind;
    if usage.is_null() && n > 0 {
        return Err(invalid("usage is null"));
    }
    let mut entries = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: the backend passes `n` attribute pointers.
        let a = obj(unsafe { *usage.add(i) }, Kind::BufferAttributes, "usage entry")?;
        let kind = match a.memory_type {
            MEMORY_CPU => MemoryKind::Cpu,
            MEMORY_CPU_PINNED => MemoryKind::CpuPinned,
            MEMORY_GPU => MemoryKind::Gpu,
            other => return Err(invalid(&format!("usage entry {i} has an unknown memory type {other}"))),
        };
        entries.push((kind, a.memory_type_id, a.byte_size as u64));
    }
    to.set(reporter, &entries);
    Ok(())
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsNew(stats: *mut *mut ResponseStatisticsObj) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsNew", || {
        if stats.is_null() {
            return Err(invalid("response_statistics is null"));
        }
        let p = Box::into_raw(Box::<ResponseStatisticsObj>::default());
        register(p as *const c_void, Kind::ResponseStatistics);
        put(stats, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsDelete(stats: *mut ResponseStatisticsObj) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsDelete", || {
        drop(take_box(stats, Kind::ResponseStatistics, "response_statistics")?);
        Ok(())
    })
}

fn with_stats(
    stats: *mut ResponseStatisticsObj,
    f: impl FnOnce(&mut ResponseStatisticsObj) -> Result<(), Err>,
) -> Result<(), Err> {
    f(obj_mut(stats, Kind::ResponseStatistics, "response_statistics")?)
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    stats: *mut ResponseStatisticsObj,
    instance: *mut InstanceObj,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance", || {
        obj(instance, Kind::Instance, "model_instance")?;
        with_stats(stats, |s| {
            s.instance = instance as usize;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    stats: *mut ResponseStatisticsObj,
    factory: *mut FactoryObj,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory", || {
        obj(factory, Kind::Factory, "response_factory")?;
        with_stats(stats, |s| {
            s.factory = factory as usize;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    stats: *mut ResponseStatisticsObj,
    ns: u64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart", || {
        with_stats(stats, |s| {
            s.response_start = ns;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    stats: *mut ResponseStatisticsObj,
    ns: u64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart", || {
        with_stats(stats, |s| {
            s.compute_output_start = ns;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    stats: *mut ResponseStatisticsObj,
    ns: u64,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd", || {
        with_stats(stats, |s| {
            s.response_end = ns;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    stats: *mut ResponseStatisticsObj,
    error: *mut ErrorObj,
) -> Err {
    guarded("TRITONBACKEND_ModelInstanceResponseStatisticsSetError", || {
        with_stats(stats, |s| {
            s.error = error as usize;
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceReportResponseStatistics(stats: *mut ResponseStatisticsObj) -> Err {
    guarded("TRITONBACKEND_ModelInstanceReportResponseStatistics", || {
        let s = obj(stats, Kind::ResponseStatistics, "response_statistics")?;
        if s.instance == 0 || !is_live(s.instance as *const c_void, Kind::Instance) {
            return Err(invalid("the response statistics name no model instance"));
        }
        if s.response_end < s.response_start {
            return Err(invalid("the response ends before it starts"));
        }
        // Checked, not kept: statistics' `response_stats` stay empty here (README, Differences).
        Ok(())
    })
}
