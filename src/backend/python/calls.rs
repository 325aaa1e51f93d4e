//! What a Python model asks of the server while it runs: BLS inference requests and calls (request
//! cancellation, custom metrics, model control). The reader thread hands them here; anything that waits
//! on the server runs as a task on the runtime, never on the reader thread or an instance thread.

use super::ipc::{self, BlsRequest};
use super::stub::Conn;
use crate::error::{Error, Result};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The server side of a stub's calls.
pub struct Calls {
    /// Where tasks run.
    runtime: Option<tokio::runtime::Handle>,
}

impl Calls {
    pub fn new(runtime: Option<tokio::runtime::Handle>) -> Self {
        Calls { runtime }
    }

    /// Runs a BLS request and sends its response(s) back.
    pub fn bls(&self, conn: &Arc<Conn>, req: BlsRequest, _payload: &[u8]) {
        let _ = &self.runtime;
        answer_bls_error(conn, req.id, &Error::unsupported("BLS is not supported yet"));
    }

    /// Answers a call; `id` is `None` for calls that want no answer.
    pub fn call(&self, conn: &Arc<Conn>, id: Option<u64>, op: &str, args: Map<String, Value>) {
        let result = match op {
            "is_cancelled" => {
                let key = args.get("key").and_then(Value::as_u64).unwrap_or(0);
                Ok(Value::Bool(conn.stream_cancelled(key)))
            }
            other => Err(Error::unsupported(format!("'{other}' is not supported by this server yet"))),
        };
        reply(conn, id, result);
    }
}

/// Sends the answer to a call, if it wants one.
pub fn reply(conn: &Conn, id: Option<u64>, result: Result<Value>) {
    let Some(id) = id else {
        if let Err(e) = result {
            tracing::warn!("{}: {}", conn.label, e.message);
        }
        return;
    };
    let msg = match result {
        Ok(v) => json!({"type": "reply", "id": id, "value": v}),
        Err(e) => json!({"type": "reply", "id": id, "error": e.message}),
    };
    if let Err(e) = conn.send(&msg, &[]) {
        tracing::debug!("{}", e.message);
    }
}

/// Answers a BLS request with an error response.
pub fn answer_bls_error(conn: &Conn, id: u64, e: &Error) {
    let msg = json!({
        "type": "bls_resp", "id": id, "final": true,
        "resp": {"err": {"m": e.message, "c": ipc::code_from_error(e)}},
    });
    if let Err(e) = conn.send(&msg, &[]) {
        tracing::debug!("{}", e.message);
    }
}
