//! Listings that survive a bad object key.
//!
//! object_store turns every key of a listing page into a `Path`, and one key no path may hold (a `..`,
//! `.` or empty part, a control character) fails the whole page, and with it every sync of the
//! repository until someone deletes that key. Its clients give no way to list raw keys, so the HTTP
//! client under them is wrapped: the body of a listing response (S3 and GCS `ListBucketResult`, Azure
//! `EnumerationResults`) has the entries whose keys `Path::parse` would refuse cut out before
//! object_store parses it, and the keys cut out are kept for the repository to name in a warning.
//! Every other request and response passes through untouched.

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::path::Path as ObjPath;
use object_store::ClientOptions;
use quick_xml::events::Event;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A key left out of a listing, and why no file may be named so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedKey {
    pub key: String,
    pub why: String,
}

/// The keys the filter cut out since the repository last took them.
pub type Skipped = Arc<parking_lot::Mutex<Vec<SkippedKey>>>;

/// Why `key` cannot be an object_store `Path` (and so no file in the cache), or `None` when it can.
pub fn key_problem(key: &str) -> Option<String> {
    ObjPath::parse(key).err()?;
    let inner = key.strip_prefix('/').unwrap_or(key);
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    let why = if inner.split('/').any(|p| p == "." || p == "..") {
        "it has a '.' or '..' part".to_string()
    } else if inner.split('/').any(str::is_empty) {
        "it has an empty part ('//')".to_string()
    } else if key.chars().any(|c| c.is_ascii_control()) {
        "it holds a control character".to_string()
    } else {
        // Whatever object_store refuses beyond the above, in its own words.
        ObjPath::parse(key).err().map(|e| e.to_string()).unwrap_or_default()
    };
    Some(why)
}

/// The elements of a listing's entries, each with the child that holds its key.
type Entries = &'static [(&'static [u8], &'static [u8])];
/// S3's `ListBucketResult` (GCS's XML API answers in the same form).
const S3: Entries = &[(b"Contents", b"Key"), (b"CommonPrefixes", b"Prefix")];
/// Azure's `EnumerationResults`.
const AZURE: Entries = &[(b"Blob", b"Name"), (b"BlobPrefix", b"Name")];

/// Which listing a request asks for, by its query.
fn listing_kind(req: &HttpRequest) -> Option<Entries> {
    if req.method() != http::Method::GET {
        return None;
    }
    let query = req.uri().query()?;
    let has = |pair: &str| query.split('&').any(|p| p == pair);
    // S3's ListObjectsV2, and GCS's XML API, which object_store lists with the same request.
    if has("list-type=2") {
        return Some(S3);
    }
    // Azure's List Blobs.
    if has("comp=list") && has("restype=container") {
        return Some(AZURE);
    }
    None
}

/// `body` without the entries whose key fails [`key_problem`], and those keys; `None` when the body
/// is not XML this can read (object_store then reports it as it would have).
pub fn filter_listing(body: &[u8], entries: Entries) -> Option<(Vec<u8>, Vec<SkippedKey>)> {
    struct Open {
        start: usize,
        depth: usize,
        key_child: &'static [u8],
        key_from: Option<usize>,
        key: Option<(usize, usize)>,
    }
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut out = Vec::with_capacity(body.len());
    let mut copied = 0usize;
    let mut skipped = Vec::new();
    let mut depth = 0usize;
    let mut open: Option<Open> = None;
    loop {
        let before = usize::try_from(reader.buffer_position()).ok()?;
        let event = reader.read_event().ok()?;
        let after = usize::try_from(reader.buffer_position()).ok()?;
        match event {
            Event::Eof => break,
            Event::Start(e) => {
                depth += 1;
                let name = e.local_name();
                match &mut open {
                    None => {
                        if let Some(&(_, key_child)) = entries.iter().find(|(e, _)| *e == name.as_ref()) {
                            open = Some(Open { start: before, depth, key_child, key_from: None, key: None });
                        }
                    }
                    Some(o) if depth == o.depth + 1 && name.as_ref() == o.key_child => o.key_from = Some(after),
                    Some(_) => {}
                }
            }
            Event::Empty(e) => {
                if let Some(o) = &mut open {
                    if depth == o.depth && e.local_name().as_ref() == o.key_child {
                        o.key = Some((after, after));
                    }
                }
            }
            Event::End(_) => {
                if let Some(o) = &mut open {
                    if depth == o.depth + 1 {
                        if let Some(from) = o.key_from.take() {
                            o.key = Some((from, before));
                        }
                    } else if depth == o.depth {
                        let key = o.key.and_then(|(a, b)| {
                            let raw = std::str::from_utf8(body.get(a..b)?).ok()?;
                            quick_xml::escape::unescape(raw).ok().map(|k| k.into_owned())
                        });
                        let problem = match &key {
                            Some(k) => key_problem(k).map(|why| (k.clone(), why)),
                            None => Some((
                                String::from_utf8_lossy(&body[o.start..after]).into_owned(),
                                "its name cannot be read".to_string(),
                            )),
                        };
                        if let Some((key, why)) = problem {
                            out.extend_from_slice(&body[copied..o.start]);
                            copied = after;
                            skipped.push(SkippedKey { key, why });
                        }
                        open = None;
                    }
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    out.extend_from_slice(&body[copied..]);
    Some((out, skipped))
}

/// object_store's own reqwest client, with listing responses filtered.
#[derive(Debug)]
pub struct FilteringConnector {
    pub skipped: Skipped,
}

impl HttpConnector for FilteringConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(KeyFilter { inner, skipped: self.skipped.clone() }))
    }
}

#[derive(Debug)]
struct KeyFilter {
    inner: HttpClient,
    skipped: Skipped,
}

type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'a>>;

// `HttpService` is declared with `#[async_trait]`; this is the signature that macro gives it.
impl HttpService for KeyFilter {
    fn call<'life0, 'async_trait>(&'life0 self, req: HttpRequest) -> CallFuture<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let kind = listing_kind(&req);
            let response = self.inner.execute(req).await?;
            let Some(entries) = kind.filter(|_| response.status().is_success()) else { return Ok(response) };
            let (mut parts, body) = response.into_parts();
            // A listing page is what object_store buffers whole anyway (1,000 keys at most).
            let bytes = body.bytes().await?;
            let bytes = match filter_listing(&bytes, entries) {
                Some((kept, skipped)) if !skipped.is_empty() => {
                    self.skipped.lock().extend(skipped);
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    bytes::Bytes::from(kept)
                }
                _ => bytes,
            };
            Ok(HttpResponse::from_parts(parts, bytes.into()))
        })
    }
}

#[cfg(test)]
mod tests;
