//! Triton repository agent libraries (`libtritonrepoagent_<name>.so`, TRITONREPOAGENT API 0.1) as
//! [`RepoAgent`]s (the TRITONREPOAGENT_* functions they call back are in `agent_api.rs`). An agent
//! library is loaded once (RTLD_NOW | RTLD_LOCAL, never unloaded) and initialized; each model it serves gets its own
//! `TRITONREPOAGENT_AgentModel`, initialized before its LOAD and finalized after its last action.
//! Folders an agent acquires (`TRITONREPOAGENT_ModelRepositoryLocationAcquire`) are temporary
//! folders removed when released or when the model's agents are finalized.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`;
//! out-pointers and strings valid for the call); library entry points are called with registered
//! objects and have the documented signatures of their names.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::agent_api::{AgentModelObj, AgentObj};
use super::guard::{take_error, to_error};
use crate::error::{Error, Result};
use crate::model_api::agents::{AgentAction, AgentModel, RepoAgent};
use parking_lot::Mutex;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;

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
        let lib = super::library::open_plugin(path).map_err(|e| fail(e.message))?;
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
