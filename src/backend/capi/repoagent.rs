//! Triton repository agent libraries (`libtritonrepoagent_<name>.so`, TRITONREPOAGENT API 0.1) as
//! [`RepoAgent`]s, and the TRITONREPOAGENT_* functions they call back. An agent library is loaded
//! once (RTLD_NOW | RTLD_LOCAL, never unloaded) and initialized; each model it serves gets its own
//! `TRITONREPOAGENT_AgentModel`, initialized before its LOAD and finalized after its last action.
//! Folders an agent acquires (`TRITONREPOAGENT_ModelRepositoryLocationAcquire`) are temporary
//! folders removed when released or when the model's agents are finalized.
//!
//! Contract for every `unsafe` block: as in `exports.rs` (object pointers only after `is_live`;
//! out-pointers and strings valid for the call); library entry points are called with registered
//! objects and have the documented signatures of their names.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::exports::{guarded, invalid, new_error, new_message, obj, put, take_error, text, Err};
use super::host::to_error;
use crate::error::{Error, Result};
use crate::model_api::agents::{AgentAction, AgentModel, RepoAgent};
use parking_lot::Mutex;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// TRITONREPOAGENT_API_VERSION_MAJOR / _MINOR.
const AGENT_API_MAJOR: u32 = 0;
const AGENT_API_MINOR: u32 = 1;
/// `TRITONREPOAGENT_ArtifactType`.
const ARTIFACT_LOCAL: u32 = 0;

/// `TRITONREPOAGENT_Agent`.
pub struct AgentObj {
    pub name: CString,
    pub state: AtomicPtr<c_void>,
}

/// `TRITONREPOAGENT_AgentModel`: one agent's view of one model.
pub struct AgentModelObj {
    pub agent: *const AgentObj,
    pub location: Mutex<CString>,
    pub parameters: Vec<(CString, CString)>,
    pub config_json: String,
    pub state: AtomicPtr<c_void>,
    /// Folders the agent acquired and has not released.
    pub acquired: Mutex<Vec<(CString, tempfile::TempDir)>>,
}

type AgentFn = unsafe extern "C" fn(*mut AgentObj) -> *mut ErrorObj;
type ModelFn = unsafe extern "C" fn(*mut AgentObj, *mut AgentModelObj) -> *mut ErrorObj;
type ActionFn = unsafe extern "C" fn(*mut AgentObj, *mut AgentModelObj, u32) -> *mut ErrorObj;

struct Inner {
    agent: Box<AgentObj>,
    path: PathBuf,
    model_initialize: Option<ModelFn>,
    model_finalize: Option<ModelFn>,
    action: ActionFn,
}

// SAFETY: the agent object is read through an atomic and immutable fields; the entry points are plain
// function pointers into a library that is never unloaded.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Inner {
    fn ptr(&self) -> *mut AgentObj {
        &*self.agent as *const AgentObj as *mut AgentObj
    }
}

/// A loaded agent library.
pub struct CAgent(Arc<Inner>);

fn check(e: *mut ErrorObj, call: &str) -> Result<()> {
    match take_error(e) {
        None => Ok(()),
        Some((code, message)) => Err(to_error(code, &format!("{call}: {message}"))),
    }
}

impl CAgent {
    /// Loads `path` as agent `name` and runs its `TRITONREPOAGENT_Initialize`.
    pub fn load(path: &Path, name: &str) -> Result<CAgent> {
        let fail = |why: String| Error::unavailable(format!("repository agent '{name}' ({}): {why}", path.display()));
        if !path.is_file() {
            return Err(fail("not found (install it there, or set --repoagent-directory)".into()));
        }
        // The agent's NEEDED libtritonserver.so, and the API where the executable exports none.
        let forwarding = super::library::forwarding();
        if !super::library::api_exported() {
            if let Err(why) = forwarding {
                return Err(fail(format!("needs Triton's C API, which this binary does not export, and {why}")));
            }
        }
        let lib = super::library::open_plugin(path).map_err(fail)?;
        macro_rules! entry {
            ($name:literal) => {{
                // SAFETY: the symbol is the TRITONREPOAGENT entry point of that name, whose documented
                // signature is the binding's type.
                unsafe { super::library::entry_point(&lib, concat!($name, "\0")) }
            }};
        }
        let initialize: Option<AgentFn> = entry!("TRITONREPOAGENT_Initialize");
        let action: Option<ActionFn> = entry!("TRITONREPOAGENT_ModelAction");
        let action =
            action.ok_or_else(|| fail("lacks TRITONREPOAGENT_ModelAction, which every agent must export".into()))?;
        let inner = Inner {
            agent: Box::new(AgentObj { name: cstring(name), state: AtomicPtr::new(std::ptr::null_mut()) }),
            path: path.to_path_buf(),
            model_initialize: entry!("TRITONREPOAGENT_ModelInitialize"),
            model_finalize: entry!("TRITONREPOAGENT_ModelFinalize"),
            action,
        };
        // Agents are kept for the process, as tritonserver keeps them (and TRITONREPOAGENT_Finalize is
        // never due before exit).
        std::mem::forget(lib);
        register(inner.ptr() as *const c_void, Kind::Agent);
        if let Some(init) = initialize {
            // SAFETY: see the module's contract; the agent object is registered.
            if let Err(e) = check(unsafe { init(inner.ptr()) }, "TRITONREPOAGENT_Initialize") {
                unregister(inner.ptr() as *const c_void);
                std::mem::forget(inner);
                return Err(fail(e.message));
            }
        }
        tracing::info!("Loaded repository agent '{name}' from '{}'.", path.display());
        Ok(CAgent(Arc::new(inner)))
    }
}

impl RepoAgent for CAgent {
    fn model(
        &self,
        name: &str,
        location: &Path,
        parameters: &[(String, String)],
        config_json: &str,
    ) -> Result<Box<dyn AgentModel>> {
        let _ = name;
        let obj = Box::new(AgentModelObj {
            agent: self.0.ptr(),
            location: Mutex::new(cstring(&location.display().to_string())),
            parameters: parameters.iter().map(|(k, v)| (cstring(k), cstring(v))).collect(),
            config_json: config_json.to_string(),
            state: AtomicPtr::new(std::ptr::null_mut()),
            acquired: Mutex::new(Vec::new()),
        });
        let p = &*obj as *const AgentModelObj as *mut AgentModelObj;
        register(p as *const c_void, Kind::AgentModel);
        if let Some(init) = self.0.model_initialize {
            // SAFETY: see the module's contract.
            if let Err(e) = check(unsafe { init(self.0.ptr(), p) }, "TRITONREPOAGENT_ModelInitialize") {
                unregister(p as *const c_void);
                return Err(e);
            }
        }
        Ok(Box::new(CAgentModel { agent: self.0.clone(), obj }))
    }
}

struct CAgentModel {
    agent: Arc<Inner>,
    obj: Box<AgentModelObj>,
}

// SAFETY: the model object is used through a mutex, atomics and immutable fields.
unsafe impl Send for CAgentModel {}
// SAFETY: as above.
unsafe impl Sync for CAgentModel {}

impl CAgentModel {
    fn ptr(&self) -> *mut AgentModelObj {
        &*self.obj as *const AgentModelObj as *mut AgentModelObj
    }
}

impl AgentModel for CAgentModel {
    fn action(&mut self, action: AgentAction) -> Result<()> {
        // SAFETY: see the module's contract.
        let e = unsafe { (self.agent.action)(self.agent.ptr(), self.ptr(), action as u32) };
        check(e, &format!("TRITONREPOAGENT_ModelAction({action:?})"))
            .map_err(|e| e.context(format!("agent library '{}'", self.agent.path.display())))
    }

    fn location(&self) -> PathBuf {
        PathBuf::from(self.obj.location.lock().to_string_lossy().into_owned())
    }
}

impl Drop for CAgentModel {
    fn drop(&mut self) {
        if let Some(fini) = self.agent.model_finalize {
            // SAFETY: see the module's contract.
            if let Err(e) = check(unsafe { fini(self.agent.ptr(), self.ptr()) }, "TRITONREPOAGENT_ModelFinalize") {
                tracing::warn!("Repository agent '{}': {}", self.agent.agent.name.to_string_lossy(), e.message);
            }
        }
        unregister(self.ptr() as *const c_void);
        // Acquired folders go with their TempDir.
    }
}

// ---- the TRITONREPOAGENT functions agents call ----

fn agent_model<'a>(agent: *mut AgentObj, model: *mut AgentModelObj) -> Result<&'a AgentModelObj, Err> {
    obj(agent, Kind::Agent, "agent")?;
    let m = obj(model, Kind::AgentModel, "model")?;
    if !std::ptr::eq(m.agent, agent) {
        return Err(invalid("the model belongs to another agent"));
    }
    Ok(m)
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ApiVersion(major: *mut u32, minor: *mut u32) -> Err {
    guarded("TRITONREPOAGENT_ApiVersion", || {
        put(major, AGENT_API_MAJOR);
        put(minor, AGENT_API_MINOR);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelRepositoryLocation(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    artifact_type: *mut u32,
    location: *mut *const c_char,
) -> Err {
    guarded("TRITONREPOAGENT_ModelRepositoryLocation", || {
        let m = agent_model(agent, model)?;
        put(artifact_type, ARTIFACT_LOCAL);
        // The string stays put until ModelRepositoryUpdate replaces it; the API lets agents use it until then.
        put(location, m.location.lock().as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelRepositoryLocationAcquire(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    artifact_type: u32,
    location: *mut *const c_char,
) -> Err {
    guarded("TRITONREPOAGENT_ModelRepositoryLocationAcquire", || {
        let m = agent_model(agent, model)?;
        if artifact_type != ARTIFACT_LOCAL {
            return Err(new_error(code::UNSUPPORTED, "only local (filesystem) locations can be acquired"));
        }
        let dir = tempfile::Builder::new()
            .prefix("tritonrs-agent-")
            .tempdir()
            .map_err(|e| new_error(code::UNAVAILABLE, &format!("cannot create a folder for the agent: {e}")))?;
        let path = cstring(&dir.path().display().to_string());
        let p = path.as_ptr();
        m.acquired.lock().push((path, dir));
        put(location, p);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelRepositoryLocationRelease(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    location: *const c_char,
) -> Err {
    guarded("TRITONREPOAGENT_ModelRepositoryLocationRelease", || {
        let m = agent_model(agent, model)?;
        let loc = text(location, "location")?;
        let mut acquired = m.acquired.lock();
        let i = acquired
            .iter()
            .position(|(p, _)| p.as_bytes() == loc.as_bytes())
            .ok_or_else(|| new_error(code::NOT_FOUND, &format!("'{loc}' is not a location the agent acquired")))?;
        if m.location.lock().as_bytes() == loc.as_bytes() {
            return Err(invalid("the model's current location cannot be released"));
        }
        acquired.remove(i);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelRepositoryUpdate(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    artifact_type: u32,
    location: *const c_char,
) -> Err {
    guarded("TRITONREPOAGENT_ModelRepositoryUpdate", || {
        let m = agent_model(agent, model)?;
        if artifact_type != ARTIFACT_LOCAL {
            return Err(new_error(code::UNSUPPORTED, "only local (filesystem) locations are supported"));
        }
        let loc = text(location, "location")?;
        if !Path::new(loc).is_dir() {
            return Err(invalid(&format!("the new location '{loc}' is not a folder")));
        }
        *m.location.lock() = cstring(loc);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelParameterCount(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    count: *mut u32,
) -> Err {
    guarded("TRITONREPOAGENT_ModelParameterCount", || {
        put(count, agent_model(agent, model)?.parameters.len() as u32);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelParameter(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    index: u32,
    name: *mut *const c_char,
    value: *mut *const c_char,
) -> Err {
    guarded("TRITONREPOAGENT_ModelParameter", || {
        let m = agent_model(agent, model)?;
        let (k, v) = m
            .parameters
            .get(index as usize)
            .ok_or_else(|| invalid(&format!("parameter index {index} is out of range ({})", m.parameters.len())))?;
        put(name, k.as_ptr());
        put(value, v.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelConfig(
    agent: *mut AgentObj,
    model: *mut AgentModelObj,
    config_version: u32,
    config: *mut *mut MessageObj,
) -> Err {
    guarded("TRITONREPOAGENT_ModelConfig", || {
        let m = agent_model(agent, model)?;
        if config_version != 1 {
            return Err(new_error(
                code::UNSUPPORTED,
                &format!("model configuration version {config_version} is not supported (only 1)"),
            ));
        }
        if config.is_null() {
            return Err(invalid("model_config is null"));
        }
        put(config, new_message(&m.config_json));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelState(model: *mut AgentModelObj, state: *mut *mut c_void) -> Err {
    guarded("TRITONREPOAGENT_ModelState", || {
        put(state, obj(model, Kind::AgentModel, "model")?.state.load(Ordering::Acquire));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_ModelSetState(model: *mut AgentModelObj, state: *mut c_void) -> Err {
    guarded("TRITONREPOAGENT_ModelSetState", || {
        obj(model, Kind::AgentModel, "model")?.state.store(state, Ordering::Release);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_State(agent: *mut AgentObj, state: *mut *mut c_void) -> Err {
    guarded("TRITONREPOAGENT_State", || {
        put(state, obj(agent, Kind::Agent, "agent")?.state.load(Ordering::Acquire));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn TRITONREPOAGENT_SetState(agent: *mut AgentObj, state: *mut c_void) -> Err {
    guarded("TRITONREPOAGENT_SetState", || {
        obj(agent, Kind::Agent, "agent")?.state.store(state, Ordering::Release);
        Ok(())
    })
}
