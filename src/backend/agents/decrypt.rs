//! The built-in `decrypt` repository agent: a model whose files are encrypted with AES-256-GCM (by
//! `tritonrs encrypt-model`) is decrypted into a private folder before it loads, and the backend reads
//! it there. Every file of the model but its top-level `config.pbtxt` must be a ciphertext made with
//! the key for that very file (its path is authenticated too), or the load fails naming the file.
//! The key comes from `--repoagent-config=decrypt,key-file=PATH`: a file of 32 bytes (or 64 hex
//! digits) that only the server's user may read; it is read at each load and never logged. A
//! relocating agent: the model's location becomes the private folder.
//!
//! # Where the plaintext goes
//! The agent keeps one folder of its own, `tritonrs-decrypt-<uid>` (mode 0700), inside the work folder
//! (`--repoagent-config=decrypt,work-dir=DIR`, else the first of `$RUNTIME_DIRECTORY` (systemd's
//! `RuntimeDirectory=`, where the folder is `decrypt`), `$XDG_RUNTIME_DIR`, `/dev/shm` and `$TMPDIR`:
//! RAM-backed filesystems first, so no plaintext reaches a disk and a power cut or a kill -9 leaves
//! none there). The work folder may be shared with other programs (a mode-1777 folder): the agent
//! never changes it, its mode or anything else in it. Inside its own folder, each loaded model has a
//! private folder (mode 0700), removed when the model unloads or fails to load; at start-up the
//! folders a killed server left there are removed before any model loads.
//!
//! # File format (version 2)
//! ```text
//! offset  size  field
//!      0     8  magic "TRSENC\0\x02" (the last byte is the format version)
//!      8     4  chunk size: plaintext bytes per chunk, little-endian, 4 KiB to 16 MiB
//!     12     7  random nonce prefix
//!     19     …  chunks: each sealed with AES-256-GCM (ciphertext then 16-byte tag); every chunk but
//!               the last holds exactly `chunk size` plaintext bytes; the last holds the rest (0 to
//!               `chunk size` bytes) and is sealed as the last
//! ```
//! The chunks follow the STREAM construction (`aead::stream::StreamBE32`): chunk `i`'s nonce is the
//! prefix, `i` as a 32-bit big-endian counter and a last-chunk flag byte, so chunks cannot be
//! reordered, dropped or cut off at a chunk boundary without failing authentication. Every chunk's
//! associated data is the 19 header bytes followed by the file's path relative to the model folder
//! (`1/model.onnx`, as bytes), so neither can the header be altered nor a file be put in another's
//! place. Version 1 (magic ending in 1) authenticated the header alone; such files are refused with a
//! message to encrypt the model again. A big model streams through one chunk of memory. Files are decrypted or encrypted by the RustCrypto crates;
//! nothing here is cryptography written by hand.

use crate::error::{Error, Result};
use crate::model_api::agents::{AgentAction, AgentModel, RepoAgent};
use aes_gcm::aead::stream::{DecryptorBE32, EncryptorBE32};
use aes_gcm::aead::{OsRng, Payload};
use aes_gcm::{Aes256Gcm, KeyInit};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The first bytes of an encrypted file; the last one is the format version.
pub const MAGIC: &[u8; 8] = b"TRSENC\0\x02";
/// The magic less its version byte, to tell a file of another version from one never encrypted.
const MAGIC_STEM: &[u8; 7] = b"TRSENC\0";
const HEADER_LEN: usize = 19;
const PREFIX_LEN: usize = 7;
const TAG_LEN: usize = 16;
/// Plaintext bytes per chunk that `encrypt-model` writes.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
const MIN_CHUNK: u32 = 4 << 10;
const MAX_CHUNK: u32 = 16 << 20;
/// The file the server needs before any agent runs, left in plaintext by `encrypt-model`.
const CONFIG: &str = "config.pbtxt";
/// The agent's own folder inside a work folder given with `work-dir=` or found in a shared place.
const OWN_FOLDER: &str = "tritonrs-decrypt";

/// A 256-bit key. Its `Debug` shows nothing of it.
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Reads a key file: 32 bytes, or 64 hex digits (a trailing newline allowed). It must be a regular
/// file that neither group nor others may read or write, as for an ssh key; the message never shows
/// any of its content.
pub fn read_key(path: &Path) -> Result<Key> {
    let what = || format!("decrypt key file '{}'", path.display());
    let meta = std::fs::metadata(path).map_err(|e| Error::invalid(format!("cannot read the {}: {e}", what())))?;
    if !meta.is_file() {
        return Err(Error::invalid(format!("the {} is not a regular file", what())));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Error::invalid(format!(
            "the {} may be read by other users (mode {:o}); make it readable only by the server's user (chmod 600)",
            what(),
            meta.permissions().mode() & 0o777
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::invalid(format!("cannot read the {}: {e}", what())))?;
    let mut key = [0u8; 32];
    let text = std::str::from_utf8(&bytes).ok().map(str::trim_end);
    match (bytes.len(), text) {
        (32, _) => key.copy_from_slice(&bytes),
        (_, Some(t)) if t.len() == 64 && hex::decode_to_slice(t, &mut key).is_ok() => {}
        _ => {
            return Err(Error::invalid(format!(
                "the {} must hold 32 bytes or 64 hex digits, but holds {} bytes",
                what(),
                bytes.len()
            )))
        }
    }
    Ok(Key(key))
}

/// Reads into `buf` until it is full or the input ends; the number of bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Every chunk's associated data: the header, then the file's path relative to the model folder.
fn associated_data(header: &[u8; HEADER_LEN], rel: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    [&header[..], rel.as_os_str().as_bytes()].concat()
}

/// Encrypts `input`, the model's file at `rel` (relative to the model folder), into `output` in the
/// format above.
pub fn encrypt(key: &Key, chunk: u32, rel: &Path, input: &mut impl Read, output: &mut impl Write) -> Result<()> {
    use aes_gcm::aead::rand_core::RngCore;
    let io = |e: std::io::Error| Error::internal(format!("cannot encrypt: {e}"));
    let chunk = chunk.clamp(MIN_CHUNK, MAX_CHUNK);
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&chunk.to_le_bytes());
    OsRng.fill_bytes(&mut header[12..]);
    output.write_all(&header).map_err(io)?;
    let aad = associated_data(&header, rel);
    let cipher = Aes256Gcm::new(&key.0.into());
    let prefix: [u8; PREFIX_LEN] = header[12..].try_into().map_err(|_| Error::internal("nonce prefix size"))?;
    let mut enc = EncryptorBE32::from_aead(cipher, &prefix.into());
    let mut buf = vec![0u8; chunk as usize];
    let mut reader = BufReader::new(input);
    let sealed = |e| Error::internal(format!("cannot encrypt: {e}"));
    loop {
        let n = fill(&mut reader, &mut buf).map_err(io)?;
        // A full chunk is the last only when nothing follows it.
        let last = n < buf.len() || reader.fill_buf().map_err(io)?.is_empty();
        let payload = Payload { msg: &buf[..n], aad: &aad };
        if last {
            output.write_all(&enc.encrypt_last(payload).map_err(sealed)?).map_err(io)?;
            return Ok(());
        }
        output.write_all(&enc.encrypt_next(payload).map_err(sealed)?).map_err(io)?;
    }
}

/// Decrypts `input` (which starts with the header), the model's file at `rel` (relative to the model
/// folder, named in messages), into `output`. A wrong key, a tampered byte, a file cut short and a
/// file encrypted for another path all fail authentication; the output written so far must then be
/// discarded by the caller.
pub fn decrypt(key: &Key, rel: &Path, input: &mut impl Read, output: &mut impl Write) -> Result<()> {
    let name = rel.display();
    let io = |e: std::io::Error| Error::invalid(format!("cannot decrypt '{name}': {e}"));
    let mut header = [0u8; HEADER_LEN];
    let n = fill(input, &mut header).map_err(io)?;
    if n >= MAGIC.len() && header[..MAGIC_STEM.len()] == MAGIC_STEM[..] && header[7] != MAGIC[7] {
        let version = header[7];
        return Err(Error::invalid(match version < MAGIC[7] {
            true => format!(
                "'{name}' was encrypted in format version {version}, which does not bind a file to its path \
                 and is no longer accepted; encrypt the model again with `tritonrs encrypt-model`"
            ),
            false => format!(
                "'{name}' was encrypted in format version {version}, newer than this server reads ({}); \
                 encrypt the model with this server's `tritonrs encrypt-model`",
                MAGIC[7]
            ),
        }));
    }
    if n < HEADER_LEN || &header[..8] != MAGIC {
        let what = if n == 0 { " (it is empty)" } else { "" };
        return Err(Error::invalid(format!(
            "'{name}' is not a file encrypted by tritonrs encrypt-model{what}; every file of a model under \
             the decrypt agent but config.pbtxt must be"
        )));
    }
    let chunk = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
        return Err(Error::invalid(format!("'{name}' has an invalid chunk size {chunk} in its header")));
    }
    let cipher = Aes256Gcm::new(&key.0.into());
    let prefix: [u8; PREFIX_LEN] = header[12..].try_into().map_err(|_| Error::internal("nonce prefix size"))?;
    let mut dec = DecryptorBE32::from_aead(cipher, &prefix.into());
    let aad = associated_data(&header, rel);
    let failed = || {
        Error::invalid(format!(
            "cannot decrypt '{name}': authentication failed (a wrong key, or the file was altered, cut short \
             or encrypted as another file of the model)"
        ))
    };
    let mut buf = vec![0u8; chunk as usize + TAG_LEN];
    let mut reader = BufReader::new(input);
    loop {
        let n = fill(&mut reader, &mut buf).map_err(io)?;
        let last = n < buf.len() || reader.fill_buf().map_err(io)?.is_empty();
        let payload = Payload { msg: &buf[..n], aad: &aad };
        if last {
            output.write_all(&dec.decrypt_last(payload).map_err(|_| failed())?).map_err(io)?;
            return Ok(());
        }
        output.write_all(&dec.decrypt_next(payload).map_err(|_| failed())?).map_err(io)?;
    }
}

/// The regular files under `dir`, relative to it, following links to files and folders (a version
/// folder may be a link), at most 32 levels deep.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(root: &Path, rel: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
        let here = root.join(rel);
        let entries =
            std::fs::read_dir(&here).map_err(|e| Error::invalid(format!("cannot list '{}': {e}", here.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::invalid(format!("cannot list '{}': {e}", here.display())))?;
            let rel = rel.join(entry.file_name());
            let meta = std::fs::metadata(root.join(&rel))
                .map_err(|e| Error::invalid(format!("cannot read '{}': {e}", rel.display())))?;
            if meta.is_dir() {
                if depth >= 32 {
                    return Err(Error::invalid(format!("'{}' is nested too deeply", rel.display())));
                }
                walk(root, &rel, depth + 1, out)?;
            } else if meta.is_file() {
                out.push(rel);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, Path::new(""), 0, &mut out)?;
    out.sort();
    Ok(out)
}

/// `tritonrs encrypt-model`: writes a copy of the model folder `src` into `dst` (which must not exist)
/// with every file encrypted but the top-level `config.pbtxt`, which the server reads before any agent
/// runs. Returns the number of files encrypted.
pub fn encrypt_model(src: &Path, dst: &Path, key: &Key, chunk: u32) -> Result<usize> {
    if dst.exists() {
        return Err(Error::invalid(format!("'{}' exists; give a new folder for the encrypted model", dst.display())));
    }
    let mut encrypted = 0;
    for rel in files(src)? {
        let to = dst.join(&rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::invalid(format!("cannot create '{}': {e}", parent.display())))?;
        }
        let from = src.join(&rel);
        if rel == Path::new(CONFIG) {
            std::fs::copy(&from, &to).map_err(|e| Error::invalid(format!("cannot copy '{}': {e}", from.display())))?;
            continue;
        }
        let mut input =
            std::fs::File::open(&from).map_err(|e| Error::invalid(format!("cannot read '{}': {e}", from.display())))?;
        let mut output = std::io::BufWriter::new(
            std::fs::File::create(&to).map_err(|e| Error::invalid(format!("cannot write '{}': {e}", to.display())))?,
        );
        encrypt(key, chunk, &rel, &mut input, &mut output)?;
        output.flush().map_err(|e| Error::invalid(format!("cannot write '{}': {e}", to.display())))?;
        encrypted += 1;
    }
    Ok(encrypted)
}

/// The agent: its own folder, and the key file.
pub struct Decrypt {
    key_file: Option<PathBuf>,
    /// The agent's own folder (see the module's doc); holds one private folder per loaded model,
    /// named `<pid>-<n>-<model>`. Nothing outside it is created, changed or removed, but the work
    /// folder itself when it does not exist yet.
    root: PathBuf,
    next: AtomicU64,
}

impl Decrypt {
    /// The agent with its settings: `key-file`, and `work-dir` (`None`: the default, see
    /// [`default_root`]). Folders that a previous server left in the agent's own folder (its process
    /// is gone) are removed now, before any model loads.
    pub fn new(key_file: Option<PathBuf>, work_dir: Option<PathBuf>) -> Decrypt {
        let uid = rustix::process::geteuid().as_raw();
        let root = match work_dir {
            Some(dir) => dir.join(format!("{OWN_FOLDER}-{uid}")),
            None => default_root(&|name| std::env::var_os(name), Path::new("/dev/shm"), uid),
        };
        remove_stale(&root);
        Decrypt { key_file, root, next: AtomicU64::new(0) }
    }

    /// The agent's own folder, where the private folders go.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// The agent's own folder when no `work-dir` is given: on a RAM-backed filesystem where there is one,
/// so that plaintext never reaches a disk, and a server killed in the middle of a load leaves it in
/// memory only, gone at the next boot at the latest. In order: the service's runtime directory under
/// systemd (`RuntimeDirectory=`, a tmpfs private to the service, where the folder is `decrypt`), the
/// user's runtime directory (`$XDG_RUNTIME_DIR`, a tmpfs), `/dev/shm` (`shm`: a tmpfs shared by every
/// user, hence the uid in the name), else the temporary directory (`$TMPDIR`, else `/tmp`).
/// Variables that are not absolute paths are ignored, as the XDG specification asks.
fn default_root(var: &dyn Fn(&str) -> Option<std::ffi::OsString>, shm: &Path, uid: u32) -> PathBuf {
    let absolute = |name: &str| var(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let own = format!("{OWN_FOLDER}-{uid}");
    // systemd may list several runtime directories, separated by ':'; the first is the service's own.
    let runtime = var("RUNTIME_DIRECTORY")
        .and_then(|d| d.to_string_lossy().split(':').next().map(PathBuf::from))
        .filter(|p| p.is_absolute());
    if let Some(dir) = runtime {
        return dir.join("decrypt");
    }
    if let Some(dir) = absolute("XDG_RUNTIME_DIR") {
        return dir.join(own);
    }
    if shm.is_dir() {
        return shm.join(own);
    }
    absolute("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp")).join(own)
}

/// Creates the agent's own folder `root` (mode 0700), or checks that the one there is its own: a
/// folder (not a link) of this user that no one else may use. The work folder around it is created
/// (0700) only if it does not exist; an existing one is left exactly as it is.
fn make_root(root: &Path) -> Result<()> {
    let failed = |e: std::io::Error| Error::internal(format!("cannot create '{}': {e}", root.display()));
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent).map_err(failed)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => check_root(root),
        Err(e) => Err(failed(e)),
    }
}

/// Whether an existing `root` is the agent's own: a folder, not a link, of this user, that neither
/// group nor others may use. Anything else may be another program's or another user's, and is
/// neither used nor changed.
fn check_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(root)
        .map_err(|e| Error::internal(format!("cannot read '{}': {e}", root.display())))?;
    let uid = rustix::process::geteuid().as_raw();
    let refuse = |why: String| {
        Err(Error::internal(format!(
            "the decrypt agent's folder '{}' {why}; remove it, or choose another folder with \
             --repoagent-config=decrypt,work-dir=DIR",
            root.display()
        )))
    };
    if !meta.is_dir() {
        return refuse("exists and is not a folder".into());
    }
    if meta.uid() != uid {
        return refuse(format!("belongs to user {}, not to the server's user {uid}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return refuse(format!("may be used by other users (mode {:o}, not 700)", meta.mode() & 0o7777));
    }
    Ok(())
}

/// Removes, from the agent's own folder, the folders of processes that no longer run, and those of an
/// earlier process that had this pid (a container's server is often pid 1 every time). Once per
/// folder and process: a second agent in this process must not remove the first one's folders.
/// Nothing is removed from a folder that is not the agent's own (see [`check_root`]).
fn remove_stale(root: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if swept.iter().any(|d| d == root) {
            return;
        }
        swept.push(root.to_path_buf());
    }
    if !root.exists() {
        return;
    }
    if let Err(e) = check_root(root) {
        tracing::warn!("Leaving the folders in '{}' alone: {}", root.display(), e.message);
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == me || !Path::new(&format!("/proc/{pid}")).exists() {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::info!("Removed '{}', left decrypted by a server that stopped.", entry.path().display())
                }
                Err(e) => tracing::warn!("Cannot remove '{}': {e}", entry.path().display()),
            }
        }
    }
}

impl RepoAgent for Decrypt {
    fn model(
        &self,
        name: &str,
        location: &Path,
        _parameters: &[(String, String)],
        _config_json: &str,
    ) -> Result<Box<dyn AgentModel>> {
        let key_file = self.key_file.clone().ok_or_else(|| {
            Error::invalid(
                "the decrypt agent has no key: start the server with --repoagent-config=decrypt,key-file=PATH",
            )
        })?;
        let safe: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' { c } else { '_' }).collect();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let private = self.root.join(format!("{}-{n}-{safe}", std::process::id()));
        Ok(Box::new(DecryptModel {
            source: location.to_path_buf(),
            key_file,
            root: self.root.clone(),
            private,
            decrypted: false,
        }))
    }
}

struct DecryptModel {
    source: PathBuf,
    key_file: PathBuf,
    /// The agent's own folder.
    root: PathBuf,
    /// The private folder this model's plaintext goes into.
    private: PathBuf,
    /// Set once the files are in `private`, which is then the model's location.
    decrypted: bool,
}

impl DecryptModel {
    fn load(&mut self) -> Result<()> {
        let key = read_key(&self.key_file)?;
        make_root(&self.root)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.private)
            .map_err(|e| Error::internal(format!("cannot create '{}': {e}", self.private.display())))?;
        let result = self.decrypt_all(&key);
        if result.is_err() {
            self.remove();
        }
        result
    }

    /// Decrypts every file but `config.pbtxt` (copied as it is) into the private folder; a file that
    /// is not a ciphertext for this key and its path fails the whole load.
    fn decrypt_all(&mut self, key: &Key) -> Result<()> {
        let mut count = 0;
        for rel in files(&self.source)? {
            let (from, to) = (self.source.join(&rel), self.private.join(&rel));
            // A full work folder (a small /dev/shm in a container) is the likely cause of a failed write.
            let write = |e: std::io::Error, path: &Path| {
                Error::internal(format!(
                    "cannot write '{}': {e} (decrypted models are kept in '{}'; choose another folder with \
                     --repoagent-config=decrypt,work-dir=DIR)",
                    path.display(),
                    self.root.display()
                ))
            };
            if let Some(parent) = to.parent() {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent).map_err(|e| write(e, parent))?;
            }
            let shown = rel.display().to_string();
            let read = |e: std::io::Error| Error::invalid(format!("cannot read '{shown}': {e}"));
            let mut output = std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&to)
                    .map_err(|e| write(e, &to))?,
            );
            let mut input = std::fs::File::open(&from).map_err(read)?;
            if rel == Path::new(CONFIG) {
                std::io::copy(&mut input, &mut output).map_err(read)?;
            } else {
                decrypt(key, &rel, &mut input, &mut output)?;
                count += 1;
            }
            output.flush().map_err(|e| write(e, &to))?;
        }
        if count == 0 {
            return Err(Error::invalid(format!(
                "the decrypt agent found no encrypted file in '{}' (see tritonrs encrypt-model)",
                self.source.display()
            )));
        }
        self.decrypted = true;
        tracing::info!("Decrypted {count} files of the model into a private folder.");
        Ok(())
    }

    fn remove(&mut self) {
        self.decrypted = false;
        if let Err(e) = std::fs::remove_dir_all(&self.private) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("Cannot remove the decrypted model in '{}': {e}", self.private.display());
            }
        }
    }
}

impl AgentModel for DecryptModel {
    fn action(&mut self, action: AgentAction) -> Result<()> {
        match action {
            AgentAction::Load => self.load(),
            AgentAction::LoadFail | AgentAction::UnloadComplete => {
                self.remove();
                Ok(())
            }
            AgentAction::LoadComplete | AgentAction::Unload => Ok(()),
        }
    }

    fn location(&self) -> PathBuf {
        if self.decrypted {
            self.private.clone()
        } else {
            self.source.clone()
        }
    }
}

impl Drop for DecryptModel {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests;
