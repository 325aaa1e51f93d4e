//! Cloud model repositories (S3, GCS, Azure) kept in a local cache the core scans like any folder.
//!
//! Layout under the cache folder of one repository (`<cache>/repositories/<slug>/`):
//!
//! ```text
//! models/<model>          -> ../store/<model>/g<N>   (a symbolic link: the view the core scans)
//! store/<model>/g<N>/     one complete download of the model (a generation)
//! store/<model>/g<N>.json its manifest: every object's relative path, size, ETag and modification time
//! store/<model>/g<N>.partial/  a download under way (removed if found later)
//! ```
//!
//! A sync lists the bucket once, compares each model's objects with the manifest of the generation
//! its link points at, and downloads a changed model into a new generation: objects whose size and
//! ETag are unchanged are hard-linked from the old generation, the rest are fetched. Only a complete
//! generation is switched in, by renaming a new link over the old one, so a half-downloaded model is
//! never seen; a failed download leaves the link (and the model being served) as it was. The previous
//! generation is kept (a load may still be reading it) and older ones are removed. After a restart a
//! model whose manifest still matches the bucket loads with no download at all.
//!
//! A key no file may be named by (a `..`, `.` or empty part, a control character) is left out of the
//! listing with a warning naming it, and the rest syncs. Sizes are bounded from the listing, before
//! anything is fetched: `config.pbtxt` and label files by what the server would read of them, every
//! other file by `--repository-max-file-mb`; a model with a file over its bound is not downloaded.

pub mod credentials;
pub mod listing;
pub mod url;

use crate::core::repository::limits::{MAX_CONFIG_BYTES, MAX_LABEL_FILE_BYTES};
use crate::core::repository::{RemoteRepository, SyncProgress, SyncScope};
use crate::error::Error;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use credentials::CredentialFile;
use listing::{Skipped, SkippedKey};
pub use url::is_cloud;

/// One object of a model: what tells whether the cached copy is still the bucket's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub size: u64,
    pub etag: Option<String>,
    /// RFC 3339; compared only when the store gives no ETag.
    pub modified: String,
}

impl Entry {
    fn same_object(&self, other: &Entry) -> bool {
        self.size == other.size
            && match (&self.etag, &other.etag) {
                (Some(a), Some(b)) => a == b,
                _ => self.modified == other.modified,
            }
    }
}

/// A model's objects by path relative to its folder.
pub type Manifest = BTreeMap<String, Entry>;

fn same_manifest(a: &Manifest, b: &Manifest) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((ka, ea), (kb, eb))| ka == kb && ea.same_object(eb))
}

/// Where caches go when `--repository-cache-dir` is not given: systemd's `CacheDirectory=`
/// (`$CACHE_DIRECTORY`), else `$XDG_CACHE_HOME/tritonrs`, else `~/.cache/tritonrs`, else
/// `/var/tmp/tritonrs`.
pub fn default_cache_dir() -> PathBuf {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = std::env::var("CACHE_DIRECTORY").ok().and_then(|v| v.split(':').next().map(PathBuf::from)) {
        if !d.as_os_str().is_empty() {
            return d;
        }
    }
    var("XDG_CACHE_HOME")
        .map(|d| d.join("tritonrs"))
        .or_else(|| var("HOME").map(|h| h.join(".cache/tritonrs")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp/tritonrs"))
}

/// A folder name for a repository URL: readable, and unique through a digest of the whole URL.
fn slug(url: &str) -> String {
    use sha2::Digest;
    let readable: String =
        url.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).take(80).collect();
    let digest = sha2::Sha256::digest(url.as_bytes());
    format!("{readable}-{}", hex::encode(&digest[..4]))
}

/// The default of `--repository-max-file-mb`: 4 GiB, room for the largest single-file ONNX model
/// (protobuf stops at 2 GiB) or TensorRT engine a Jetson runs, on the 16 GB eMMC of the smallest.
pub const DEFAULT_MAX_FILE_MB: u64 = 4096;

/// Why `part` (a model's name, or one folder or file name of a path in it) cannot name an entry of
/// the cache; `None` when it can.
fn part_problem(part: &str) -> Option<&'static str> {
    if part.is_empty() {
        Some("it has an empty part ('//')")
    } else if part == "." || part == ".." {
        Some("it has a '.' or '..' part")
    } else if part.chars().any(char::is_control) {
        Some("it holds a control character")
    } else if part.contains('\\') {
        Some("it holds a '\\'")
    } else if part.len() > 255 {
        Some("one of its parts is longer than 255 bytes")
    } else {
        None
    }
}

/// Objects of a listing grouped by model; objects at the repository's root, folder markers and hidden
/// model folders are left out, and so are names no model folder or file could have (returned, to be
/// named in a warning).
pub fn group(
    prefix: &str,
    objects: impl IntoIterator<Item = (String, Entry)>,
) -> (BTreeMap<String, Manifest>, Vec<SkippedKey>) {
    let mut out: BTreeMap<String, Manifest> = BTreeMap::new();
    let mut skipped = Vec::new();
    for (key, entry) in objects {
        let rel = match prefix.is_empty() {
            true => key.as_str(),
            false => match key.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) {
                Some(r) => r,
                None => continue,
            },
        };
        let Some((model, file)) = rel.split_once('/') else { continue };
        // Hidden folders are not models, as in a local repository.
        if model.starts_with('.') {
            continue;
        }
        let file = file.trim_end_matches('/');
        if let Some(why) = std::iter::once(model).chain(file.split('/')).find_map(part_problem) {
            skipped.push(SkippedKey { key: key.clone(), why: why.to_string() });
            continue;
        }
        out.entry(model.to_string()).or_default().insert(file.to_string(), entry);
    }
    // A zero-byte object named like a folder of other objects is a folder marker, not a file.
    for files in out.values_mut() {
        let markers: Vec<String> = files
            .keys()
            .filter(|k| files.range(format!("{k}/")..).next().is_some_and(|(n, _)| n.starts_with(&format!("{k}/"))))
            .cloned()
            .collect();
        for m in markers {
            files.remove(&m);
        }
    }
    (out, skipped)
}

/// `label_filename` of each output of a `config.pbtxt`, as paths relative to the model's folder;
/// nothing when the text does not parse (the load reports that).
fn label_files(config: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(config) else { return Vec::new() };
    let Ok(cfg) = crate::model_config::pbtxt::parse_config(text, "config.pbtxt") else { return Vec::new() };
    cfg.output
        .iter()
        .filter(|o| !o.label_filename.is_empty())
        .filter_map(|o| {
            let mut parts = Vec::new();
            for c in Path::new(&o.label_filename).components() {
                match c {
                    std::path::Component::Normal(p) => parts.push(p.to_str()?),
                    std::path::Component::CurDir => {}
                    // Leaving the folder: the load refuses it.
                    _ => return None,
                }
            }
            Some(parts.join("/"))
        })
        .collect()
}

/// Whether `rel` (a path in a model's folder) is a model configuration: `config.pbtxt`, or one of the
/// `configs/<name>.pbtxt` that `--model-config-name` picks from.
fn is_config(rel: &str) -> bool {
    rel == "config.pbtxt"
        || rel.strip_prefix("configs/").and_then(|n| n.strip_suffix(".pbtxt")).is_some_and(|n| !n.contains('/'))
}

pub struct CloudRepository {
    url: String,
    store: Arc<dyn ObjectStore>,
    /// The repository's folder in the bucket, as its keys spell it.
    prefix: String,
    /// Keys the client's listings left out (see [`listing`]), and those already named in a warning.
    skipped: Skipped,
    warned: parking_lot::Mutex<BTreeSet<String>>,
    /// `--repository-max-file-mb`, in bytes.
    max_file_bytes: u64,
    view: PathBuf,
    store_dir: PathBuf,
    listed: parking_lot::Mutex<Vec<String>>,
    /// One sync at a time.
    turn: tokio::sync::Mutex<()>,
    bytes: AtomicU64,
    files: AtomicU64,
    pending: AtomicU64,
    failures: AtomicU64,
}

/// How often a long download reports its progress in the log.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl CloudRepository {
    /// Sets up the client and the cache folders of `url`; contacts nothing. Errors are deployment
    /// mistakes (a malformed URL, a cache folder that cannot be made).
    pub fn open(
        url: &str,
        credentials: &CredentialFile,
        cache_dir: &Path,
        max_file_bytes: u64,
    ) -> Result<CloudRepository, Error> {
        let u = url::parse(url)?;
        let skipped = Skipped::default();
        let store = credentials::build_store(&u, credentials, &skipped)?;
        let mut r = Self::with_store(&u.url, store, &u.prefix, cache_dir)?.with_max_file_bytes(max_file_bytes);
        r.skipped = skipped;
        Ok(r)
    }

    /// Sets the bound on a model file (`--repository-max-file-mb`).
    pub fn with_max_file_bytes(mut self, n: u64) -> Self {
        self.max_file_bytes = n;
        self
    }

    /// [`Self::open`] with a client already made (tests use an in-memory store).
    pub fn with_store(url: &str, store: Arc<dyn ObjectStore>, prefix: &str, cache_dir: &Path) -> Result<Self, Error> {
        if let Some(why) = listing::key_problem(prefix) {
            return Err(Error::invalid(format!(
                "'{url}' is not a valid cloud model repository: its path cannot be a key: {why}"
            )));
        }
        let root = cache_dir.join("repositories").join(slug(url));
        let view = root.join("models");
        let store_dir = root.join("store");
        for d in [&view, &store_dir] {
            std::fs::create_dir_all(d).map_err(|e| {
                Error::internal(format!("cannot make the cache folder '{}' for '{url}': {e}", d.display()))
            })?;
        }
        Ok(CloudRepository {
            url: url.to_string(),
            store,
            prefix: prefix.to_string(),
            skipped: Skipped::default(),
            warned: Default::default(),
            max_file_bytes: DEFAULT_MAX_FILE_MB << 20,
            view,
            store_dir,
            listed: Default::default(),
            turn: Default::default(),
            bytes: AtomicU64::new(0),
            files: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    fn object_url(&self, model: &str, rel: &str) -> String {
        format!("{}/{model}/{rel}", self.url)
    }

    /// The object of a model's file, under its key as listed. `ObjPath::from` would percent-encode
    /// `~`, `%`, `#` and the like, and the client encodes the path again for the URL: `notes~1.txt`
    /// was requested as `notes%257E1.txt`. The listing already checked the key is a valid path.
    fn object_path(&self, model: &str, rel: &str) -> Result<ObjPath, Error> {
        let key = match self.prefix.is_empty() {
            true => format!("{model}/{rel}"),
            false => format!("{}/{model}/{rel}", self.prefix),
        };
        ObjPath::parse(&key).map_err(|e| {
            Error::internal(format!("cannot name the object '{}' of '{}': {e}", key.escape_debug(), self.url))
        })
    }

    fn cache_error(&self, path: &Path, e: std::io::Error) -> Error {
        Error::internal(format!("cannot write the cache of '{}' at '{}': {e}", self.url, path.display()))
    }

    /// Lists the repository: every model's manifest.
    async fn list(&self) -> Result<BTreeMap<String, Manifest>, Error> {
        // `with_store` checked that the prefix parses; as for objects, `from` would encode it again.
        let prefix = (!self.prefix.is_empty()).then(|| ObjPath::parse(&self.prefix).ok()).flatten();
        self.skipped.lock().clear();
        let mut stream = self.store.list(prefix.as_ref());
        let mut objects = Vec::new();
        while let Some(item) = stream.next().await {
            let meta = item.map_err(|e| {
                Error::unavailable(format!("cannot list the model repository '{}': {}", self.url, describe(&e)))
            })?;
            let entry = Entry { size: meta.size, etag: meta.e_tag, modified: meta.last_modified.to_rfc3339() };
            objects.push((meta.location.to_string(), entry));
        }
        if objects.is_empty() {
            // tritonserver refuses a repository path that does not exist; a listing cannot tell an
            // empty folder from a missing one, and emptying a repository by mistake should not unload
            // everything either.
            return Err(Error::unavailable(format!(
                "the model repository '{}' holds no objects (is the path right?)",
                self.url
            )));
        }
        let (models, mut skipped) = group(&self.prefix, objects);
        skipped.append(&mut self.skipped.lock());
        self.warn_skipped(skipped);
        Ok(models)
    }

    /// Names each key left out of the listing once, not at every poll; a key that goes and comes
    /// back is named again.
    fn warn_skipped(&self, skipped: Vec<SkippedKey>) {
        let mut warned = self.warned.lock();
        let mut now = BTreeSet::new();
        for s in skipped {
            if !warned.contains(&s.key) {
                tracing::warn!(
                    "Object '{}' of '{}' is skipped: {}, so no file in the cache can be named after it.",
                    s.key.escape_debug(),
                    self.url,
                    s.why
                );
            }
            now.insert(s.key);
        }
        *warned = now;
    }

    /// The generation `models/<model>` points at, with its manifest.
    fn current(&self, model: &str) -> Option<(PathBuf, Manifest)> {
        let target = std::fs::read_link(self.view.join(model)).ok()?;
        let dir = self.view.join(target);
        let name = dir.file_name()?.to_str()?.to_string();
        let manifest = std::fs::read(dir.with_file_name(format!("{name}.json"))).ok()?;
        let manifest = serde_json::from_slice(&manifest).ok()?;
        dir.is_dir().then_some((dir, manifest))
    }

    /// The numbers of the complete generations of a model.
    fn generations(dir: &Path) -> Vec<u64> {
        let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut out: Vec<u64> =
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix('g')?.parse().ok()).collect();
        out.sort_unstable();
        out
    }

    /// Brings one model up to date; true when a new generation was switched in.
    async fn bring(&self, model: &str, want: &Manifest) -> Result<bool, Error> {
        let current = self.current(model);
        if let Some((_, have)) = &current {
            if same_manifest(have, want) {
                return Ok(false);
            }
        }
        let model_dir = self.store_dir.join(model);
        let n = Self::generations(&model_dir).last().map_or(1, |g| g + 1);
        let partial = model_dir.join(format!("g{n}.partial"));
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| self.cache_error(&partial, e))?;
        }
        std::fs::create_dir_all(&partial).map_err(|e| self.cache_error(&partial, e))?;
        let result = self.fill(model, want, current.as_ref(), &partial).await;
        let manifest = match result {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&partial);
                return Err(e);
            }
        };
        let done = model_dir.join(format!("g{n}"));
        let manifest_path = model_dir.join(format!("g{n}.json"));
        let tmp_manifest = model_dir.join(format!(".g{n}.json.tmp"));
        let json = serde_json::to_vec(&manifest).map_err(|e| Error::internal(e.to_string()))?;
        std::fs::write(&tmp_manifest, json).map_err(|e| self.cache_error(&tmp_manifest, e))?;
        std::fs::rename(&tmp_manifest, &manifest_path).map_err(|e| self.cache_error(&manifest_path, e))?;
        std::fs::rename(&partial, &done).map_err(|e| self.cache_error(&done, e))?;
        // The switch: a new link renamed over the old one (rename(2) replaces it in one step).
        let link = self.view.join(model);
        let tmp_link = self.view.join(format!(".{model}.link"));
        let _ = std::fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(Path::new("../store").join(model).join(format!("g{n}")), &tmp_link)
            .map_err(|e| self.cache_error(&tmp_link, e))?;
        std::fs::rename(&tmp_link, &link).map_err(|e| self.cache_error(&link, e))?;
        // Keep this generation and the one before it (a load may still be reading it).
        let keep_prev =
            current.as_ref().and_then(|(d, _)| d.file_name()?.to_str()?.strip_prefix('g')?.parse::<u64>().ok());
        for g in Self::generations(&model_dir) {
            if g != n && Some(g) != keep_prev {
                let _ = std::fs::remove_dir_all(model_dir.join(format!("g{g}")));
                let _ = std::fs::remove_file(model_dir.join(format!("g{g}.json")));
            }
        }
        Ok(true)
    }

    /// The most bytes the file `rel` of a model may have, and what kind of bound that is: the server
    /// reads `config.pbtxt` and label files whole into memory, and bounds them when it does.
    fn bound(&self, rel: &str, labels: &[String]) -> (u64, String) {
        if is_config(rel) {
            (MAX_CONFIG_BYTES as u64, format!("{MAX_CONFIG_BYTES} bytes for a model configuration"))
        } else if labels.iter().any(|l| l == rel) && MAX_LABEL_FILE_BYTES < self.max_file_bytes {
            (MAX_LABEL_FILE_BYTES, format!("{MAX_LABEL_FILE_BYTES} bytes for a label file"))
        } else {
            (
                self.max_file_bytes,
                format!("{} MiB for a model file (--repository-max-file-mb)", self.max_file_bytes >> 20),
            )
        }
    }

    /// Refuses a model with a file whose listed size is over its bound, before anything of it is
    /// fetched (a 200 MB `config.pbtxt` used to be downloaded whole, then refused by the load).
    fn check_sizes(&self, model: &str, want: &Manifest, labels: &[String]) -> Result<(), Error> {
        for (rel, entry) in want {
            let (limit, what) = self.bound(rel, labels);
            if entry.size > limit {
                return Err(Error::invalid(format!(
                    "'{}' is listed at {} bytes, over the limit of {what}; model '{model}' is not downloaded.",
                    self.object_url(model, rel),
                    entry.size
                )));
            }
        }
        Ok(())
    }

    /// Checks the label files the model's `config.pbtxt` (already in `dir`) names against their bound.
    fn check_labels(&self, model: &str, want: &Manifest, dir: &Path) -> Result<(), Error> {
        let config = dir.join("config.pbtxt");
        let what = format!("'{}'", config.display());
        // Bounded from its listed size already; bounded here too, whatever is on disk.
        let Ok(text) =
            crate::core::repository::limits::read_file_bounded(&config, MAX_CONFIG_BYTES as u64, false, &what)
        else {
            return Ok(());
        };
        self.check_sizes(model, want, &label_files(&text))
    }

    /// Writes every object of `want` into `dir`: linked from the current generation when unchanged,
    /// downloaded otherwise. Returns the manifest of what was written. Sizes are checked against
    /// their bounds first: every file's from the listing, then, once `config.pbtxt` is in `dir`
    /// (fetched first), the label files it names.
    async fn fill(
        &self,
        model: &str,
        want: &Manifest,
        current: Option<&(PathBuf, Manifest)>,
        dir: &Path,
    ) -> Result<Manifest, Error> {
        self.check_sizes(model, want, &[])?;
        let mut out = Manifest::new();
        let mut fetch = Vec::new();
        for (rel, entry) in want {
            let target = dir.join(rel);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| self.cache_error(parent, e))?;
            }
            let old =
                current.filter(|(_, m)| m.get(rel).is_some_and(|e| e.same_object(entry))).map(|(d, _)| d.join(rel));
            match old {
                Some(old) if std::fs::hard_link(&old, &target).is_ok() || std::fs::copy(&old, &target).is_ok() => {
                    out.insert(rel.clone(), entry.clone());
                }
                _ => fetch.push((rel, entry)),
            }
        }
        // The configuration first: it names the label files.
        fetch.sort_by_key(|(rel, _)| rel.as_str() != "config.pbtxt");
        if out.contains_key("config.pbtxt") {
            self.check_labels(model, want, dir)?;
        }
        let total_bytes: u64 = fetch.iter().map(|(_, e)| e.size).sum();
        let total_files = fetch.len();
        if total_files == 0 {
            return Ok(out);
        }
        tracing::info!(
            "Downloading model '{model}' from '{}': {total_files} files, {}.",
            self.url,
            human_bytes(total_bytes)
        );
        // One sync runs at a time, so the gauge is this download's.
        self.pending.store(total_bytes, Ordering::Relaxed);
        let started = Instant::now();
        let mut progress = Progress { done_bytes: 0, done_files: 0, last_log: Instant::now() };
        let mut result = Ok(());
        for (rel, _) in &fetch {
            let limit = self.bound(rel, &[]).0;
            match self.download(model, rel, &dir.join(rel), limit, &mut progress, total_bytes, total_files).await {
                Ok(got) => {
                    out.insert(rel.to_string(), got);
                    progress.done_files += 1;
                    self.files.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            if rel.as_str() == "config.pbtxt" {
                if let Err(e) = self.check_labels(model, want, dir) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.pending.store(0, Ordering::Relaxed);
        result?;
        tracing::info!(
            "Downloaded model '{model}' from '{}': {total_files} files, {} in {:.1} s.",
            self.url,
            human_bytes(total_bytes),
            started.elapsed().as_secs_f64()
        );
        Ok(out)
    }

    /// Streams one object into `target`; a stream that ends early or fails names the object and how
    /// far it got. An object larger than `limit` when fetched (it changed since the listing), or a
    /// stream longer than announced, is refused without writing past the bound. Returns the entry of
    /// what was written (the ETag of the copy actually fetched).
    #[allow(clippy::too_many_arguments)]
    async fn download(
        &self,
        model: &str,
        rel: &str,
        target: &Path,
        limit: u64,
        progress: &mut Progress,
        total_bytes: u64,
        total_files: usize,
    ) -> Result<Entry, Error> {
        let url = self.object_url(model, rel);
        let got = self
            .store
            .get(&self.object_path(model, rel)?)
            .await
            .map_err(|e| Error::unavailable(format!("cannot download '{url}': {}", describe(&e))))?;
        let fetched =
            Entry { size: got.meta.size, etag: got.meta.e_tag.clone(), modified: got.meta.last_modified.to_rfc3339() };
        if fetched.size > limit {
            return Err(Error::invalid(format!(
                "'{url}' is {} bytes now, over the limit of {limit} bytes for it; model '{model}' is not downloaded.",
                fetched.size
            )));
        }
        let mut file = std::fs::File::create(target).map_err(|e| self.cache_error(target, e))?;
        let mut stream = got.into_stream();
        let mut written: u64 = 0;
        let cut_off = |written: u64, why: String| {
            Error::unavailable(format!(
                "the download of '{url}' was cut off after {written} of {} bytes: {why}",
                fetched.size
            ))
        };
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| cut_off(written, describe(&e)))?;
            let n = chunk.len() as u64;
            if written.saturating_add(n) > fetched.size {
                return Err(cut_off(written, "the server sent more bytes than it announced".into()));
            }
            file.write_all(&chunk).map_err(|e| self.cache_error(target, e))?;
            written += n;
            progress.done_bytes += n;
            self.bytes.fetch_add(n, Ordering::Relaxed);
            let _ = self.pending.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| Some(p.saturating_sub(n)));
            if progress.last_log.elapsed() >= PROGRESS_EVERY {
                progress.last_log = Instant::now();
                tracing::info!(
                    "Downloading model '{model}': {} of {total_files} files, {} of {}.",
                    progress.done_files,
                    human_bytes(progress.done_bytes),
                    human_bytes(total_bytes)
                );
            }
        }
        if written != fetched.size {
            return Err(cut_off(written, "the stream ended early".into()));
        }
        // On disk before the switch: a power cut must not leave a generation of holes behind a link.
        file.sync_all().map_err(|e| self.cache_error(target, e))?;
        Ok(fetched)
    }

    async fn sync_inner(&self, scope: SyncScope<'_>) -> Vec<Error> {
        let _turn = self.turn.lock().await;
        let listing = match self.list().await {
            Ok(l) => l,
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                return vec![e];
            }
        };
        *self.listed.lock() = listing.keys().cloned().collect();
        let wanted: Vec<&String> = match scope {
            SyncScope::All => listing.keys().collect(),
            SyncScope::Models(names) => names.iter().filter(|n| listing.contains_key(*n)).collect(),
            SyncScope::List => Vec::new(),
        };
        let mut errors = Vec::new();
        for name in wanted {
            match self.bring(name, &listing[name]).await {
                Ok(true) => tracing::info!("Model '{name}' of '{}' is up to date in the cache.", self.url),
                Ok(false) => {}
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    errors.push(e);
                }
            }
        }
        // Models gone from the store leave the view; their files go at the next sync, once the core
        // has unloaded them.
        let gone: Vec<String> = match scope {
            SyncScope::All => self.linked().into_iter().filter(|n| !listing.contains_key(n)).collect(),
            SyncScope::Models(names) => names.iter().filter(|n| !listing.contains_key(*n)).cloned().collect(),
            SyncScope::List => Vec::new(),
        };
        for name in gone {
            let link = self.view.join(&name);
            if std::fs::remove_file(&link).is_ok() {
                tracing::info!("Model '{name}' is no longer in '{}'.", self.url);
            }
        }
        if matches!(scope, SyncScope::All) {
            let linked = self.linked();
            if let Ok(rd) = std::fs::read_dir(&self.store_dir) {
                for e in rd.filter_map(|e| e.ok()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if !linked.contains(&name) && !listing.contains_key(&name) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        errors
    }

    /// The models the view links to.
    fn linked(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.view) else { return Vec::new() };
        rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| !n.starts_with('.')).collect()
    }
}

impl std::fmt::Debug for CloudRepository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudRepository").field("url", &self.url).field("view", &self.view).finish_non_exhaustive()
    }
}

struct Progress {
    done_bytes: u64,
    done_files: usize,
    last_log: Instant,
}

/// An error with its causes on one line: object_store's own text leaves out the innermost ones
/// (`connection refused`, `timed out`), which are what an operator needs.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg = format!("{msg}: {text}");
        }
        source = s.source();
    }
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

impl RemoteRepository for CloudRepository {
    fn url(&self) -> &str {
        &self.url
    }

    fn local_dir(&self) -> &Path {
        &self.view
    }

    fn listed_models(&self) -> Vec<String> {
        self.listed.lock().clone()
    }

    fn sync<'a>(&'a self, scope: SyncScope<'a>) -> BoxFuture<'a, Vec<Error>> {
        Box::pin(self.sync_inner(scope))
    }

    fn progress(&self) -> SyncProgress {
        SyncProgress {
            bytes: self.bytes.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            pending_bytes: self.pending.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests;
