//! The TRITONREPOAGENT_* functions repository agent libraries call back (exported,
//! `exports.list`), and the `TRITONREPOAGENT_Agent` and `TRITONREPOAGENT_AgentModel` objects they
//! are handed. Loading the libraries and calling them is `repoagent.rs`'s.
//!
//! Contract for every `unsafe` block: as in `guard.rs` (object pointers only after `is_live`;
//! out-pointers and strings valid for the call).
#![allow(unsafe_code)]
#![allow(non_snake_case)]

use super::abi::*;
use super::guard::{guarded, invalid, new_error, obj, put, put_config, state_accessors, text, Err};
use crate::error::Result;
use parking_lot::Mutex;
use std::ffi::{c_char, c_void, CString};
use std::path::Path;
use std::sync::atomic::AtomicPtr;

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
        put_config(config_version, config, &m.config_json)
    })
}

state_accessors! {
    #[no_mangle] pub extern "C" fn TRITONREPOAGENT_ModelState(model: *mut AgentModelObj, state: *mut *mut c_void) -> Err;
    #[no_mangle] pub extern "C" fn TRITONREPOAGENT_ModelSetState(model: *mut AgentModelObj, state: *mut c_void) -> Err;
    of Kind::AgentModel, "model"
}

state_accessors! {
    #[no_mangle] pub extern "C" fn TRITONREPOAGENT_State(agent: *mut AgentObj, state: *mut *mut c_void) -> Err;
    #[no_mangle] pub extern "C" fn TRITONREPOAGENT_SetState(agent: *mut AgentObj, state: *mut c_void) -> Err;
    of Kind::Agent, "agent"
}
