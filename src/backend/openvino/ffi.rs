//! Owners of OpenVINO C API objects, over `openvino-sys`'s bindings (dlopen'ed by `library`). Each
//! type frees what the C API gives it: ports, names, property strings and shapes included. (The
//! `openvino` crate does not free ports, and an output port holds the model's whole graph with its
//! weights, so every load leaked the model; nor its names and property strings.)
//!
//! Element types cross as integers, so a type a newer OpenVINO adds is an error, not an invalid Rust
//! enum. Every function here is called only after `library::load` succeeded.
#![allow(unsafe_code)]

use openvino_sys as sys;
use std::ffi::{c_char, CStr, CString};
use std::ptr;

/// OpenVINO's message for a failed call: the call, the status and OpenVINO's last error message.
fn status(s: sys::ov_status_e, what: &dyn Fn() -> String) -> Result<(), String> {
    if s == sys::ov_status_e::OK {
        return Ok(());
    }
    // SAFETY: ov_get_last_err_msg returns a new NUL-terminated copy of this thread's last message (or
    // null), which we own and free once with ov_free after copying it.
    let message = unsafe {
        let m = sys::ov_get_last_err_msg();
        if m.is_null() {
            String::new()
        } else {
            let text = CStr::from_ptr(m).to_string_lossy().trim().to_string();
            sys::ov_free(m);
            text
        }
    };
    Err(if message.is_empty() { format!("{}: {s:?}", what()) } else { format!("{}: {s:?}: {message}", what()) })
}

fn c_string(s: &str, what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} '{}' contains a NUL byte", s.escape_debug()))
}

/// Takes a string OpenVINO allocated for us, freeing it.
///
/// # Safety
/// `p` is null or a NUL-terminated string from the C API that the caller owns and must `ov_free`.
unsafe fn take_string(p: *mut c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: per the contract above; freed exactly once, after the copy.
    unsafe {
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        sys::ov_free(p);
        s
    }
}

/// An element type as OpenVINO numbers it (`ov_element_type_e`, 2025.1 and newer).
pub type Elem = u32;

pub const BOOLEAN: Elem = sys::ov_element_type_e::OV_BOOLEAN as Elem;
pub const BF16: Elem = sys::ov_element_type_e::BF16 as Elem;
pub const F16: Elem = sys::ov_element_type_e::F16 as Elem;
pub const F32: Elem = sys::ov_element_type_e::F32 as Elem;
pub const F64: Elem = sys::ov_element_type_e::F64 as Elem;
pub const I8: Elem = sys::ov_element_type_e::I8 as Elem;
pub const I16: Elem = sys::ov_element_type_e::I16 as Elem;
pub const I32: Elem = sys::ov_element_type_e::I32 as Elem;
pub const I64: Elem = sys::ov_element_type_e::I64 as Elem;
pub const U8: Elem = sys::ov_element_type_e::U8 as Elem;
pub const U16: Elem = sys::ov_element_type_e::U16 as Elem;
pub const U32: Elem = sys::ov_element_type_e::U32 as Elem;
pub const U64: Elem = sys::ov_element_type_e::U64 as Elem;

/// The C enum value of one of the constants above (the only ones this backend passes to OpenVINO).
fn to_c_elem(e: Elem) -> Result<sys::ov_element_type_e, String> {
    use sys::ov_element_type_e as E;
    [E::OV_BOOLEAN, E::BF16, E::F16, E::F32, E::F64, E::I8, E::I16, E::I32, E::I64, E::U8, E::U16, E::U32, E::U64]
        .into_iter()
        .find(|&c| c as Elem == e)
        .ok_or_else(|| format!("element type {e} is not one this backend passes to OpenVINO"))
}

/// A dimension: `min == max` when fixed; `max == -1` when unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim {
    pub min: i64,
    pub max: i64,
}

impl Dim {
    pub fn is_fixed(self) -> bool {
        self.min == self.max && self.min >= 0
    }
}

/// One model input or output as OpenVINO declares it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    pub name: String,
    pub elem: Elem,
    /// `None` for a dynamic rank.
    pub dims: Option<Vec<Dim>>,
}

pub struct Core(*mut sys::ov_core_t);

// SAFETY: an ov_core_t may be used from any thread; this owner is used by one thread at a time (it
// is not Sync) and only moves between threads.
unsafe impl Send for Core {}
// SAFETY: a model's instances share the core that compiled their model, which they only hold (so
// that it outlives the compiled model); ov::Core's methods are thread-safe in OpenVINO besides.
unsafe impl Sync for Core {}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_core_create and is freed once, here.
        unsafe { sys::ov_core_free(self.0) }
    }
}

impl Core {
    pub fn new() -> Result<Core, String> {
        let mut p = ptr::null_mut();
        // SAFETY: `p` is a valid out pointer; on success it holds a core we own.
        status(unsafe { sys::ov_core_create(&mut p) }, &|| "cannot create an OpenVINO core".into())?;
        Ok(Core(p))
    }

    /// Sets one property of `device` (as `ov::Core::set_property` with a string value).
    pub fn set_property(&mut self, device: &str, key: &str, value: &str) -> Result<(), String> {
        let (d, k, v) = (c_string(device, "device")?, c_string(key, "property")?, c_string(value, "value")?);
        // SAFETY: the core is live; the strings are NUL-terminated and outlive the call, which reads
        // exactly one key/value pair after the device name.
        let s = unsafe { sys::ov_core_set_property(self.0, d.as_ptr(), k.as_ptr(), v.as_ptr()) };
        status(s, &|| format!("OpenVINO's {device} device refuses {key}={value}"))
    }

    /// Loads a library of custom operations (`CPU_EXTENSION_PATH`) into this core.
    pub fn add_extension(&mut self, path: &str) -> Result<(), String> {
        let p = c_string(path, "path")?;
        // SAFETY: the core is live and the path NUL-terminated and alive for the call. OpenVINO opens
        // the library and runs its initializers: the file was named by the model's configuration,
        // whose author vouches for it, as with Triton's CPU_EXTENSION_PATH.
        let s = unsafe { sys::ov_core_add_extension(self.0, p.as_ptr()) };
        status(s, &|| format!("OpenVINO cannot load the extension '{path}'"))
    }

    /// The devices OpenVINO finds on this machine (`CPU`, `GPU.0`, `NPU`, ...).
    pub fn available_devices(&self) -> Result<Vec<String>, String> {
        let mut list = sys::ov_available_devices_t { devices: ptr::null_mut(), size: 0 };
        // SAFETY: the core is live and `list` a valid out struct, whose strings are ours to free (below).
        let s = unsafe { sys::ov_core_get_available_devices(self.0, &mut list) };
        status(s, &|| "OpenVINO cannot list its devices".into())?;
        let names = if list.devices.is_null() {
            Vec::new()
        } else {
            // SAFETY: on success `devices` holds `size` NUL-terminated names (non-null checked above).
            unsafe { std::slice::from_raw_parts(list.devices, list.size) }
                .iter()
                .filter(|p| !p.is_null())
                // SAFETY: each name is a NUL-terminated string owned by `list` until it is freed below.
                .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
                .collect()
        };
        // SAFETY: `list` came from the successful call above; freed once, after its names were copied.
        unsafe { sys::ov_available_devices_free(&mut list) };
        Ok(names)
    }

    /// Reads a model from its file (and weights file, for IR; "" lets OpenVINO find it).
    pub fn read_model(&self, file: &str, weights: &str) -> Result<Model, String> {
        let (f, w) = (c_string(file, "path")?, c_string(weights, "path")?);
        let mut p = ptr::null_mut();
        // SAFETY: the core is live, the paths are NUL-terminated and outlive the call, `p` is a valid
        // out pointer; on success it holds a model we own.
        let s = unsafe { sys::ov_core_read_model(self.0, f.as_ptr(), w.as_ptr(), &mut p) };
        status(s, &|| format!("OpenVINO cannot read '{file}'"))?;
        Ok(Model(p))
    }

    /// Compiles `model` for `device`, with no extra properties (the core's apply).
    pub fn compile(&self, model: &Model, device: &str) -> Result<CompiledModel, String> {
        let d = c_string(device, "device")?;
        let mut p = ptr::null_mut();
        // SAFETY: core and model are live, the device name outlives the call, `p` is a valid out
        // pointer; zero property arguments follow, so no variadic argument is read.
        let s = unsafe { sys::ov_core_compile_model(self.0, model.0, d.as_ptr(), 0, &mut p) };
        status(s, &|| format!("OpenVINO cannot compile the model for its {device} device"))?;
        Ok(CompiledModel(p))
    }
}

pub struct Model(*mut sys::ov_model_t);

// SAFETY: as for Core: used by one thread at a time, moved between threads.
unsafe impl Send for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_core_read_model and is freed once, here.
        unsafe { sys::ov_model_free(self.0) }
    }
}

/// An output port we own (freed on drop).
struct Port(*mut sys::ov_output_const_port_t);

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_model_const_{input,output}_by_index and is freed once.
        unsafe { sys::ov_output_const_port_free(self.0) }
    }
}

impl Port {
    fn info(&self) -> Result<PortInfo, String> {
        let mut name = ptr::null_mut();
        // SAFETY: the port is live and `name` a valid out pointer; the string is ours to free.
        status(unsafe { sys::ov_port_get_any_name(self.0, &mut name) }, &|| "cannot read a port's name".into())?;
        // SAFETY: `name` came from the call above, which succeeded.
        let name = unsafe { take_string(name) };
        let mut elem: Elem = 0;
        // SAFETY: the port is live; OpenVINO writes one ov_element_type_e, a 32-bit C enum, which we
        // receive as a plain u32 (the same size and alignment) so that any value is valid.
        let s = unsafe { sys::ov_port_get_element_type(self.0, (&mut elem as *mut Elem).cast()) };
        status(s, &|| format!("cannot read the element type of '{name}'"))?;
        let mut shape = sys::ov_partial_shape_t { rank: sys::ov_rank_t { min: 0, max: 0 }, dims: ptr::null_mut() };
        // SAFETY: the port is live and `shape` a valid out struct, whose dims array is ours to free.
        let s = unsafe { sys::ov_port_get_partial_shape(self.0, &mut shape) };
        status(s, &|| format!("cannot read the shape of '{name}'"))?;
        let fixed_rank = shape.rank.min == shape.rank.max && shape.rank.min >= 0;
        let dims = if fixed_rank && (shape.rank.min == 0 || !shape.dims.is_null()) {
            let n = usize::try_from(shape.rank.min).unwrap_or(0);
            // SAFETY: with a static rank, `dims` holds `rank` dimensions (checked non-null above unless
            // the rank is 0, where no element is read).
            let dims = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(shape.dims, n) } };
            Some(dims.iter().map(|d| Dim { min: d.min, max: d.max }).collect())
        } else {
            None
        };
        // SAFETY: `shape` came from the call above; freed once, after its dims were copied.
        unsafe { sys::ov_partial_shape_free(&mut shape) };
        Ok(PortInfo { name, elem, dims })
    }
}

impl Model {
    fn ports(&self, outputs: bool) -> Result<Vec<PortInfo>, String> {
        let kind = if outputs { "outputs" } else { "inputs" };
        let mut n = 0usize;
        // SAFETY: the model is live and `n` a valid out pointer.
        let s = unsafe {
            if outputs {
                sys::ov_model_outputs_size(self.0, &mut n)
            } else {
                sys::ov_model_inputs_size(self.0, &mut n)
            }
        };
        status(s, &|| format!("cannot count the model's {kind}"))?;
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            let mut p = ptr::null_mut();
            // SAFETY: the model is live, `i` is below the count it gave, `p` a valid out pointer; the port
            // is ours (wrapped at once so that it is freed).
            let s = unsafe {
                if outputs {
                    sys::ov_model_const_output_by_index(self.0, i, &mut p)
                } else {
                    sys::ov_model_const_input_by_index(self.0, i, &mut p)
                }
            };
            status(s, &|| format!("cannot read the model's {kind} #{i}"))?;
            list.push(Port(p).info()?);
        }
        Ok(list)
    }

    pub fn inputs(&self) -> Result<Vec<PortInfo>, String> {
        self.ports(false)
    }

    pub fn outputs(&self) -> Result<Vec<PortInfo>, String> {
        self.ports(true)
    }

    /// Gives the named inputs new shapes, at once (`ov::Model::reshape`).
    pub fn reshape(&mut self, shapes: &[(String, Vec<Dim>)]) -> Result<(), String> {
        let names = shapes.iter().map(|(n, _)| c_string(n, "input")).collect::<Result<Vec<_>, _>>()?;
        let mut name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut made: Vec<sys::ov_partial_shape_t> = Vec::with_capacity(shapes.len());
        let mut result = Ok(());
        for (name, dims) in shapes {
            let c_dims: Vec<sys::ov_dimension_t> =
                dims.iter().map(|d| sys::ov_dimension_t { min: d.min, max: d.max }).collect();
            let mut ps = sys::ov_partial_shape_t { rank: sys::ov_rank_t { min: 0, max: 0 }, dims: ptr::null_mut() };
            let rank = i64::try_from(c_dims.len()).unwrap_or(i64::MAX);
            // SAFETY: `c_dims` holds `rank` dimensions and outlives the call, which copies them into
            // `ps` (ours to free, below).
            let s = unsafe { sys::ov_partial_shape_create(rank, c_dims.as_ptr(), &mut ps) };
            result = status(s, &|| format!("cannot make a shape for input '{name}'"));
            if result.is_err() {
                break;
            }
            made.push(ps);
        }
        if result.is_ok() {
            // SAFETY: the model is live; `name_ptrs` and `made` hold one name and one shape per input,
            // all alive for the call.
            let s = unsafe { sys::ov_model_reshape(self.0, name_ptrs.as_mut_ptr(), made.as_ptr(), made.len()) };
            result = status(s, &|| "OpenVINO cannot reshape the model".into());
        }
        for ps in &mut made {
            // SAFETY: each shape came from ov_partial_shape_create and is freed once.
            unsafe { sys::ov_partial_shape_free(ps) };
        }
        result
    }
}

pub struct CompiledModel(*mut sys::ov_compiled_model_t);

// SAFETY: as for Core.
unsafe impl Send for CompiledModel {}
// SAFETY: the instances of a model share its compiled model (`count: N`): through `&self` it is only
// asked for properties and for new infer requests, both safe to call from several threads at once in
// OpenVINO (ov::CompiledModel's methods are thread-safe; each infer request is used by one thread).
unsafe impl Sync for CompiledModel {}

impl Drop for CompiledModel {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_core_compile_model and is freed once, here.
        unsafe { sys::ov_compiled_model_free(self.0) }
    }
}

impl CompiledModel {
    /// A property of the compiled model as OpenVINO prints it.
    pub fn property(&self, key: &str) -> Result<String, String> {
        let k = c_string(key, "property")?;
        let mut v = ptr::null_mut();
        // SAFETY: the compiled model is live, the key outlives the call, `v` is a valid out pointer;
        // the string is ours to free.
        let s = unsafe { sys::ov_compiled_model_get_property(self.0, k.as_ptr(), &mut v) };
        status(s, &|| format!("cannot read property {key}"))?;
        // SAFETY: `v` came from the successful call above.
        Ok(unsafe { take_string(v) })
    }

    pub fn infer_request(&self) -> Result<InferRequest, String> {
        let mut p = ptr::null_mut();
        // SAFETY: the compiled model is live and `p` a valid out pointer; the request is ours.
        let s = unsafe { sys::ov_compiled_model_create_infer_request(self.0, &mut p) };
        status(s, &|| "OpenVINO cannot create an infer request".into())?;
        Ok(InferRequest(p))
    }
}

pub struct InferRequest(*mut sys::ov_infer_request_t);

// SAFETY: as for Core.
unsafe impl Send for InferRequest {}

impl Drop for InferRequest {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_compiled_model_create_infer_request and is freed once.
        unsafe { sys::ov_infer_request_free(self.0) }
    }
}

/// A tensor we own.
struct OwnedTensor(*mut sys::ov_tensor_t);

impl Drop for OwnedTensor {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ov_tensor_create / ov_infer_request_get_tensor, freed once.
        unsafe { sys::ov_tensor_free(self.0) }
    }
}

/// A static shape made by OpenVINO (freed on drop).
struct OwnedShape(sys::ov_shape_t);

impl Drop for OwnedShape {
    fn drop(&mut self) {
        // SAFETY: the shape came from ov_shape_create / ov_tensor_get_shape and is freed once.
        unsafe { sys::ov_shape_free(&mut self.0) };
    }
}

/// One input of a run: the request's bytes, with the element type and shape OpenVINO is to see.
pub struct Input<'a> {
    pub name: &'a str,
    pub elem: Elem,
    pub dims: &'a [i64],
    pub bytes: &'a [u8],
    /// The element's size: bytes at an address that is a multiple of it are given to OpenVINO in place.
    pub align: usize,
}

/// Why a run failed: an input OpenVINO refuses (the request's fault) or the inference itself.
pub enum RunError {
    Input(String),
    Infer(String),
}

/// An output of a run, left in the memory OpenVINO wrote it to.
pub struct Output {
    /// Our handle of the tensor, which keeps its memory alive.
    _tensor: OwnedTensor,
    data: *const u8,
    len: usize,
    pub elem: Elem,
    pub dims: Vec<i64>,
    /// Whether the request was given a new tensor for this output, so that this one is no longer
    /// written by the next run; when false the caller must copy the bytes before the next run.
    pub detached: bool,
}

// SAFETY: an Output owns its handle of the tensor (ov::Tensor's reference count is atomic, so the
// handle may be freed on any thread) and only reads memory that no run writes any more (`detached`;
// an output that is not detached is copied by the caller before the next run).
unsafe impl Send for Output {}

impl AsRef<[u8]> for Output {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 || self.data.is_null() {
            return &[];
        }
        // SAFETY: `data` is the tensor's buffer of `len` bytes, alive while `self._tensor` is held.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

fn new_shape(dims: &[i64], what: &dyn Fn() -> String) -> Result<OwnedShape, String> {
    let mut shape = OwnedShape(sys::ov_shape_t { rank: 0, dims: ptr::null_mut() });
    let rank = i64::try_from(dims.len()).unwrap_or(i64::MAX);
    // SAFETY: `dims` holds `rank` values and outlives the call, which copies them into the shape.
    let s = unsafe { sys::ov_shape_create(rank, dims.as_ptr(), &mut shape.0) };
    status(s, &|| format!("cannot make the shape {dims:?} of {}", what()))?;
    Ok(shape)
}

/// A tensor of OpenVINO's own memory.
fn new_tensor(elem: Elem, dims: &[i64], what: &dyn Fn() -> String) -> Result<OwnedTensor, String> {
    let shape = new_shape(dims, what)?;
    let mut t = ptr::null_mut();
    // SAFETY: the shape is valid; `t` a valid out pointer; the tensor is ours (wrapped at once).
    let s = unsafe { sys::ov_tensor_create(to_c_elem(elem)?, shape.0, &mut t) };
    status(s, &|| format!("cannot make a tensor for {}", what()))?;
    Ok(OwnedTensor(t))
}

fn byte_size(t: &OwnedTensor) -> Result<usize, String> {
    let mut size = 0usize;
    // SAFETY: the tensor is live and `size` a valid out pointer.
    status(unsafe { sys::ov_tensor_get_byte_size(t.0, &mut size) }, &|| "cannot size a tensor".into())?;
    Ok(size)
}

fn data_ptr(t: &OwnedTensor, size: usize) -> Result<*mut u8, String> {
    if size == 0 {
        return Ok(ptr::null_mut());
    }
    let mut data = ptr::null_mut();
    // SAFETY: the tensor is live and `data` a valid out pointer.
    status(unsafe { sys::ov_tensor_data(t.0, &mut data) }, &|| "cannot reach a tensor's memory".into())?;
    if data.is_null() {
        return Err("OpenVINO gave a tensor no memory".into());
    }
    Ok(data.cast())
}

/// A tensor for `input`: over the caller's bytes when they are aligned for the element type, else a
/// copy in OpenVINO's memory. The tensor must not be read after `input.bytes` is gone (see `run`).
fn input_tensor(input: &Input<'_>) -> Result<OwnedTensor, String> {
    let what = || format!("input '{}'", input.name);
    let in_place = !input.bytes.is_empty() && (input.bytes.as_ptr() as usize).is_multiple_of(input.align.max(1));
    let tensor = if in_place {
        let shape = new_shape(input.dims, &what)?;
        let mut t = ptr::null_mut();
        // SAFETY: the shape is valid and `t` a valid out pointer; the tensor (ours, wrapped at once)
        // refers to the caller's bytes without owning them: OpenVINO only reads an input tensor, and
        // `run` uses it only while the bytes are borrowed. Its size is checked against theirs below
        // before OpenVINO reads anything.
        let s = unsafe {
            sys::ov_tensor_create_from_host_ptr(
                to_c_elem(input.elem)?,
                shape.0,
                input.bytes.as_ptr() as *mut std::ffi::c_void,
                &mut t,
            )
        };
        status(s, &|| format!("cannot make a tensor for {}", what()))?;
        OwnedTensor(t)
    } else {
        new_tensor(input.elem, input.dims, &what)?
    };
    let size = byte_size(&tensor)?;
    if size != input.bytes.len() {
        return Err(format!(
            "input '{}' holds {} bytes but its shape {:?} needs {size}",
            input.name,
            input.bytes.len(),
            input.dims
        ));
    }
    if !in_place && size > 0 {
        let data = data_ptr(&tensor, size)?;
        // SAFETY: `data` is the new tensor's own buffer of `size` bytes (checked equal to the input's
        // byte count); the input's bytes are a different allocation.
        unsafe { ptr::copy_nonoverlapping(input.bytes.as_ptr(), data, size) };
    }
    Ok(tensor)
}

impl InferRequest {
    /// Runs the model on `inputs`, which must name every input of the model: a tensor left from an
    /// earlier run refers to memory that run borrowed, and is never read again because each run
    /// replaces all of them before it infers.
    pub fn run(&mut self, inputs: &[Input<'_>]) -> Result<(), RunError> {
        for input in inputs {
            let tensor = input_tensor(input).map_err(RunError::Input)?;
            let n = c_string(input.name, "input").map_err(RunError::Input)?;
            // SAFETY: request and tensor are live, the name outlives the call; the request keeps its
            // own reference to the tensor, so ours may be freed afterwards.
            let s = unsafe { sys::ov_infer_request_set_tensor(self.0, n.as_ptr(), tensor.0) };
            status(s, &|| format!("OpenVINO refuses input '{}'", input.name)).map_err(RunError::Input)?;
        }
        // SAFETY: the request is live and every input tensor set above refers to memory borrowed for
        // the whole of this call.
        let s = unsafe { sys::ov_infer_request_infer(self.0) };
        status(s, &|| "OpenVINO inference failed".into()).map_err(RunError::Infer)
    }

    /// Output `name` of the last run, in OpenVINO's memory. The request gets a new tensor of the same
    /// type and shape for that output, which the next run writes into (OpenVINO resizes it when that
    /// run's shape differs), so this one stays as it is for as long as the response needs it.
    pub fn take_output(&mut self, name: &str) -> Result<Output, String> {
        let n = c_string(name, "output")?;
        let mut t = ptr::null_mut();
        // SAFETY: the request is live, the name outlives the call, `t` a valid out pointer; the tensor
        // handle is ours (wrapped at once).
        let s = unsafe { sys::ov_infer_request_get_tensor(self.0, n.as_ptr(), &mut t) };
        status(s, &|| format!("the model produced no output '{name}'"))?;
        let tensor = OwnedTensor(t);
        let mut elem: Elem = 0;
        // SAFETY: the tensor is live; the 32-bit enum is received as a u32, as in `Port::info`.
        let s = unsafe { sys::ov_tensor_get_element_type(tensor.0, (&mut elem as *mut Elem).cast()) };
        status(s, &|| format!("cannot read the element type of output '{name}'"))?;
        let mut shape = OwnedShape(sys::ov_shape_t { rank: 0, dims: ptr::null_mut() });
        // SAFETY: the tensor is live and the shape a valid out struct, freed by OwnedShape.
        status(unsafe { sys::ov_tensor_get_shape(tensor.0, &mut shape.0) }, &|| {
            format!("cannot read output '{name}'")
        })?;
        let rank = usize::try_from(shape.0.rank).unwrap_or(0);
        let dims = if rank == 0 || shape.0.dims.is_null() {
            Vec::new()
        } else {
            // SAFETY: a static shape's `dims` holds `rank` values (non-null checked above).
            unsafe { std::slice::from_raw_parts(shape.0.dims, rank) }.to_vec()
        };
        let len = byte_size(&tensor)?;
        let data = data_ptr(&tensor, len)?.cast_const();
        // An element type this backend does not pass to OpenVINO cannot be made anew: copied instead.
        let detached = to_c_elem(elem).is_ok() && self.replace_output(&n, name, elem, &dims).is_ok();
        Ok(Output { _tensor: tensor, data, len, elem, dims, detached })
    }

    fn replace_output(&mut self, n: &CStr, name: &str, elem: Elem, dims: &[i64]) -> Result<(), String> {
        let fresh = new_tensor(elem, dims, &|| format!("output '{name}'"))?;
        // SAFETY: request and tensor are live, the name outlives the call; the request keeps its own
        // reference to the new tensor, and drops its reference to the old one.
        let s = unsafe { sys::ov_infer_request_set_tensor(self.0, n.as_ptr(), fresh.0) };
        status(s, &|| format!("OpenVINO refuses a new tensor for output '{name}'"))
    }
}
