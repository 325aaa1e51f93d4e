//! The built-in `decrypt` repository agent: a model whose files are encrypted with AES-256-GCM (by
//! `tritonrs encrypt-model`) is decrypted into a private folder before it loads, and the backend reads
//! it there. The folder (mode 0700) is removed when the model unloads or fails to load, and at start-up
//! the folders a killed server left behind are removed before any model loads. The key comes from
//! `--repoagent-config=decrypt,key-file=PATH`: a file of 32 bytes (or 64 hex digits) that only the
//! server's user may read; it is read at each load and never logged. A relocating agent: the model's
//! location becomes the private folder.
//!
//! # File format (version 1)
//! ```text
//! offset  size  field
//!      0     8  magic "TRSENC\0\x01" (the last byte is the format version)
//!      8     4  chunk size: plaintext bytes per chunk, little-endian, 4 KiB to 16 MiB
//!     12     7  random nonce prefix
//!     19     …  chunks: each sealed with AES-256-GCM (ciphertext then 16-byte tag); every chunk but
//!               the last holds exactly `chunk size` plaintext bytes; the last holds the rest (0 to
//!               `chunk size` bytes) and is sealed as the last
//! ```
//! The chunks follow the STREAM construction (`aead::stream::StreamBE32`): chunk `i`'s nonce is the
//! prefix, `i` as a 32-bit big-endian counter and a last-chunk flag byte, so chunks cannot be
//! reordered, dropped or cut off at a chunk boundary without failing authentication. Every chunk's
//! associated data is the 19 header bytes, so the header cannot be altered either. A big model
//! streams through one chunk of memory. Files are decrypted or encrypted by the RustCrypto crates;
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
pub const MAGIC: &[u8; 8] = b"TRSENC\0\x01";
const HEADER_LEN: usize = 19;
const PREFIX_LEN: usize = 7;
const TAG_LEN: usize = 16;
/// Plaintext bytes per chunk that `encrypt-model` writes.
pub const DEFAULT_CHUNK: u32 = 1 << 20;
const MIN_CHUNK: u32 = 4 << 10;
const MAX_CHUNK: u32 = 16 << 20;
/// The file the server needs before any agent runs, left in plaintext by `encrypt-model`.
const CONFIG: &str = "config.pbtxt";

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

/// Encrypts `input` into `output` in the format above.
pub fn encrypt(key: &Key, chunk: u32, input: &mut impl Read, output: &mut impl Write) -> Result<()> {
    use aes_gcm::aead::rand_core::RngCore;
    let io = |e: std::io::Error| Error::internal(format!("cannot encrypt: {e}"));
    let chunk = chunk.clamp(MIN_CHUNK, MAX_CHUNK);
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&chunk.to_le_bytes());
    OsRng.fill_bytes(&mut header[12..]);
    output.write_all(&header).map_err(io)?;
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
        let payload = Payload { msg: &buf[..n], aad: &header };
        if last {
            output.write_all(&enc.encrypt_last(payload).map_err(sealed)?).map_err(io)?;
            return Ok(());
        }
        output.write_all(&enc.encrypt_next(payload).map_err(sealed)?).map_err(io)?;
    }
}

/// Decrypts `input` (which starts with the header) into `output`. `name` is for messages. A wrong
/// key, a tampered byte and a file cut short all fail authentication; the output written so far must
/// then be discarded by the caller.
pub fn decrypt(key: &Key, name: &str, input: &mut impl Read, output: &mut impl Write) -> Result<()> {
    let io = |e: std::io::Error| Error::invalid(format!("cannot decrypt '{name}': {e}"));
    let mut header = [0u8; HEADER_LEN];
    if fill(input, &mut header).map_err(io)? < HEADER_LEN || &header[..8] != MAGIC {
        return Err(Error::invalid(format!("'{name}' is not a file encrypted by tritonrs encrypt-model")));
    }
    let chunk = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
        return Err(Error::invalid(format!("'{name}' has an invalid chunk size {chunk} in its header")));
    }
    let cipher = Aes256Gcm::new(&key.0.into());
    let prefix: [u8; PREFIX_LEN] = header[12..].try_into().map_err(|_| Error::internal("nonce prefix size"))?;
    let mut dec = DecryptorBE32::from_aead(cipher, &prefix.into());
    let failed = || {
        Error::invalid(format!(
            "cannot decrypt '{name}': authentication failed (a wrong key, or the file was altered or cut short)"
        ))
    };
    let mut buf = vec![0u8; chunk as usize + TAG_LEN];
    let mut reader = BufReader::new(input);
    loop {
        let n = fill(&mut reader, &mut buf).map_err(io)?;
        let last = n < buf.len() || reader.fill_buf().map_err(io)?.is_empty();
        let payload = Payload { msg: &buf[..n], aad: &header };
        if last {
            output.write_all(&dec.decrypt_last(payload).map_err(|_| failed())?).map_err(io)?;
            return Ok(());
        }
        output.write_all(&dec.decrypt_next(payload).map_err(|_| failed())?).map_err(io)?;
    }
}

/// Whether a file starts with the format's magic.
fn is_encrypted(path: &Path) -> std::io::Result<bool> {
    let mut head = [0u8; 8];
    let n = fill(&mut std::fs::File::open(path)?, &mut head)?;
    Ok(n == 8 && &head == MAGIC)
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
        encrypt(key, chunk, &mut input, &mut output)?;
        output.flush().map_err(|e| Error::invalid(format!("cannot write '{}': {e}", to.display())))?;
        encrypted += 1;
    }
    Ok(encrypted)
}

/// The agent: where private folders go, and the key file.
pub struct Decrypt {
    key_file: Option<PathBuf>,
    /// Holds one private folder per loaded model, named `<pid>-<n>-<model>`.
    work_dir: PathBuf,
    next: AtomicU64,
}

impl Decrypt {
    /// The agent with its settings (`key-file`, `work-dir`). Folders that a previous server left in
    /// `work_dir` (its process is gone) are removed now, before any model loads.
    pub fn new(key_file: Option<PathBuf>, work_dir: PathBuf) -> Decrypt {
        remove_stale(&work_dir);
        Decrypt { key_file, work_dir, next: AtomicU64::new(0) }
    }

    /// The default folder: the service's runtime directory under systemd (`RuntimeDirectory=`, a tmpfs),
    /// else `tritonrs-decrypt-<uid>` in the temporary directory.
    pub fn default_work_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("RUNTIME_DIRECTORY").filter(|d| !d.is_empty()) {
            // systemd may list several, separated by ':'; the first is the service's own.
            let first = d.to_string_lossy().split(':').next().unwrap_or_default().to_string();
            return PathBuf::from(first).join("decrypt");
        }
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
        std::env::temp_dir().join(format!("tritonrs-decrypt-{uid}"))
    }
}

/// Removes the folders of processes that no longer run, and those of an earlier process that had this
/// pid (a container's server is often pid 1 every time). Once per folder and process: a second agent
/// in this process must not remove the first one's folders.
fn remove_stale(work_dir: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if swept.iter().any(|d| d == work_dir) {
            return;
        }
        swept.push(work_dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(work_dir) else { return };
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
        let private = self.work_dir.join(format!("{}-{n}-{safe}", std::process::id()));
        Ok(Box::new(DecryptModel {
            source: location.to_path_buf(),
            key_file,
            work_dir: self.work_dir.clone(),
            private,
            decrypted: false,
        }))
    }
}

struct DecryptModel {
    source: PathBuf,
    key_file: PathBuf,
    work_dir: PathBuf,
    /// The private folder this model's plaintext goes into.
    private: PathBuf,
    /// Set once the files are in `private`, which is then the model's location.
    decrypted: bool,
}

impl DecryptModel {
    fn load(&mut self) -> Result<()> {
        let key = read_key(&self.key_file)?;
        let private_dir = |p: &Path| std::fs::DirBuilder::new().recursive(true).mode(0o700).create(p);
        private_dir(&self.work_dir)
            .and_then(|()| std::fs::set_permissions(&self.work_dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| Error::internal(format!("cannot create '{}': {e}", self.work_dir.display())))?;
        private_dir(&self.private)
            .map_err(|e| Error::internal(format!("cannot create '{}': {e}", self.private.display())))?;
        let result = self.decrypt_all(&key);
        if result.is_err() {
            self.remove();
        }
        result
    }

    fn decrypt_all(&mut self, key: &Key) -> Result<()> {
        let mut count = 0;
        for rel in files(&self.source)? {
            let (from, to) = (self.source.join(&rel), self.private.join(&rel));
            if let Some(parent) = to.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| Error::internal(format!("cannot create '{}': {e}", parent.display())))?;
            }
            let shown = rel.display().to_string();
            let read = |e: std::io::Error| Error::invalid(format!("cannot read '{shown}': {e}"));
            let mut output = std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&to)
                    .map_err(|e| Error::internal(format!("cannot write '{}': {e}", to.display())))?,
            );
            let mut input = std::fs::File::open(&from).map_err(read)?;
            if is_encrypted(&from).map_err(read)? {
                decrypt(key, &shown, &mut input, &mut output)?;
                count += 1;
            } else {
                std::io::copy(&mut input, &mut output).map_err(read)?;
            }
            output.flush().map_err(|e| Error::internal(format!("cannot write '{}': {e}", to.display())))?;
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
mod tests {
    use super::*;

    fn key(dir: &Path, bytes: &[u8]) -> PathBuf {
        let p = dir.join("key");
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    fn round_trip(k: &Key, data: &[u8], chunk: u32) -> Vec<u8> {
        let mut sealed = Vec::new();
        encrypt(k, chunk, &mut &data[..], &mut sealed).unwrap();
        let mut out = Vec::new();
        decrypt(k, "f", &mut &sealed[..], &mut out).unwrap();
        out
    }

    #[test]
    fn round_trips_at_every_chunk_boundary() {
        let k = Key([7; 32]);
        let chunk = MIN_CHUNK as usize;
        for len in [0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk, 3 * chunk + 5] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert_eq!(round_trip(&k, &data, MIN_CHUNK), data, "length {len}");
        }
    }

    #[test]
    fn wrong_key_tampering_and_truncation_fail() {
        let k = Key([1; 32]);
        let data = vec![5u8; 3 * MIN_CHUNK as usize];
        let mut sealed = Vec::new();
        encrypt(&k, MIN_CHUNK, &mut &data[..], &mut sealed).unwrap();
        let fails = |k: &Key, bytes: &[u8]| decrypt(k, "f", &mut &bytes[..], &mut Vec::new()).unwrap_err().message;
        assert!(fails(&Key([2; 32]), &sealed).contains("authentication failed"));
        let mut tampered = sealed.clone();
        let at = tampered.len() - 1;
        tampered[at] ^= 1;
        assert!(fails(&k, &tampered).contains("authentication failed"), "the last tag");
        let mut header = sealed.clone();
        header[12] ^= 1;
        assert!(fails(&k, &header).contains("authentication failed"), "the nonce prefix");
        // Cut at a chunk boundary: the remaining chunks are whole, but none is sealed as the last.
        let boundary = HEADER_LEN + 2 * (MIN_CHUNK as usize + TAG_LEN);
        assert!(fails(&k, &sealed[..boundary]).contains("authentication failed"));
        assert!(fails(&k, &sealed[..sealed.len() - 7]).contains("authentication failed"));
        assert!(fails(&k, b"plain text").contains("not a file encrypted"));
    }

    #[test]
    fn key_files_must_be_private_and_the_right_size() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_key(&key(dir.path(), &[9; 32])).unwrap().0, [9; 32]);
        let hex_key = format!("{}\n", "ab".repeat(32));
        assert_eq!(read_key(&key(dir.path(), hex_key.as_bytes())).unwrap().0, [0xab; 32]);
        let e = read_key(&key(dir.path(), &[9; 31])).unwrap_err();
        assert!(e.message.contains("31 bytes"), "{}", e.message);
        let p = key(dir.path(), &[9; 32]);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_key(&p).unwrap_err().message.contains("chmod 600"));
        assert!(read_key(&dir.path().join("none")).is_err());
    }

    #[test]
    fn an_agent_decrypts_into_a_private_folder_and_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("plain");
        std::fs::create_dir_all(src.join("1")).unwrap();
        std::fs::write(src.join("config.pbtxt"), b"backend: \"onnxruntime\"").unwrap();
        std::fs::write(src.join("1/model.onnx"), vec![3u8; 10_000]).unwrap();
        let kp = key(dir.path(), &[4; 32]);
        let enc = dir.path().join("enc");
        assert_eq!(encrypt_model(&src, &enc, &read_key(&kp).unwrap(), MIN_CHUNK).unwrap(), 1);
        assert!(is_encrypted(&enc.join("1/model.onnx")).unwrap());
        assert!(!is_encrypted(&enc.join("config.pbtxt")).unwrap());
        assert!(encrypt_model(&src, &enc, &read_key(&kp).unwrap(), MIN_CHUNK).is_err(), "dst exists");

        let work = dir.path().join("work");
        // A folder left by a process that is gone is removed when the agent starts.
        std::fs::create_dir_all(work.join("4194999-0-old")).unwrap();
        let agent = Decrypt::new(Some(kp), work.clone());
        assert!(!work.join("4194999-0-old").exists());
        let mut m = agent.model("my model", &enc, &[], "{}").unwrap();
        assert_eq!(m.location(), enc);
        m.action(AgentAction::Load).unwrap();
        let loc = m.location();
        assert!(loc.starts_with(&work) && loc != enc);
        assert_eq!(std::fs::read(loc.join("1/model.onnx")).unwrap(), vec![3u8; 10_000]);
        assert_eq!(std::fs::metadata(&loc).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&work).unwrap().permissions().mode() & 0o777, 0o700);
        m.action(AgentAction::Unload).unwrap();
        m.action(AgentAction::UnloadComplete).unwrap();
        assert!(!loc.exists());

        // A model with no encrypted file, or a wrong key, fails and leaves nothing behind.
        let mut plain = agent.model("p", &src, &[], "{}").unwrap();
        assert!(plain.action(AgentAction::Load).unwrap_err().message.contains("no encrypted file"));
        let wrong = Decrypt::new(Some(key(dir.path(), &[5; 32])), work.clone());
        let mut w = wrong.model("w", &enc, &[], "{}").unwrap();
        assert!(w.action(AgentAction::Load).unwrap_err().message.contains("authentication failed"));
        assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
        assert!(Decrypt::new(None, work).model("x", &enc, &[], "{}").is_err());
    }
}
