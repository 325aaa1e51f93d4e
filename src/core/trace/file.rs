//! The trace file in tritonserver's layout: one JSON array in `<file>`, opened at its first write and
//! closed with `]` at shutdown, or self-contained arrays in `<file>.0`, `<file>.1`, ... (chunks).

use parking_lot::Mutex;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The main file while it is open.
#[derive(Default)]
struct MainFile {
    /// `None` until the first write, as tritonserver creates the file only when it has traces.
    file: Option<File>,
    /// Set at shutdown: the array is closed and later traces are dropped.
    closed: bool,
}

/// Where the traces of every setting go (the path is fixed at start, so there is one).
pub(super) struct TraceFile {
    /// `--trace-config triton,file=`; empty means no tracing.
    path: String,
    /// The number of the next chunk file.
    next_index: AtomicU64,
    main: Mutex<MainFile>,
}

impl TraceFile {
    pub fn new(path: String) -> TraceFile {
        TraceFile { path, next_index: AtomicU64::new(0), main: Mutex::new(MainFile::default()) }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Writes `records` (comma-separated JSON objects): as a whole `<file>.<n>` when `chunk`, else
    /// appended to the array in `<file>`. Failures are logged: tracing never fails a request.
    pub fn save(&self, records: &str, chunk: bool) {
        if records.is_empty() {
            return;
        }
        let mut main = self.main.lock();
        if main.closed {
            tracing::warn!("A trace finished after the trace file was closed at shutdown; it was not written.");
            return;
        }
        if chunk {
            // The lock is held only to order chunks against shutdown; each chunk is its own file.
            let path = format!("{}.{}", self.path, self.next_index.fetch_add(1, Ordering::Relaxed));
            let written = File::create(&path).and_then(|mut f| {
                f.write_all(b"[")?;
                f.write_all(records.as_bytes())?;
                f.write_all(b"]")
            });
            if let Err(e) = written {
                tracing::error!("Cannot write the trace file '{path}': {e}");
            }
            return;
        }
        let written = match main.file.as_mut() {
            Some(f) => f.write_all(b",").and_then(|()| f.write_all(records.as_bytes())),
            None => File::create(&self.path).and_then(|mut f| {
                f.write_all(b"[")?;
                f.write_all(records.as_bytes())?;
                main.file = Some(f);
                Ok(())
            }),
        };
        if let Err(e) = written {
            tracing::error!("Cannot write the trace file '{}': {e}", self.path);
        }
    }

    /// Ends the JSON array of `<file>` so it parses; later saves are dropped.
    pub fn close(&self) {
        let mut main = self.main.lock();
        main.closed = true;
        if let Some(mut f) = main.file.take() {
            if let Err(e) = f.write_all(b"]").and_then(|()| f.sync_data()) {
                tracing::error!("Cannot finish the trace file '{}': {e}", self.path);
            }
        }
    }
}
