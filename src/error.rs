//! The one transport-neutral error type, and the only place that maps it to HTTP and gRPC codes.

use std::fmt;

/// What went wrong, from the caller's point of view. Front-ends map this, and only this, to status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client sent something malformed or inconsistent with the model (400 / INVALID_ARGUMENT).
    InvalidArgument,
    /// The model, version or other named thing does not exist (404 / NOT_FOUND).
    NotFound,
    /// The model exists but cannot serve now: not ready, loading, queue full (503 / UNAVAILABLE).
    Unavailable,
    /// The request body is larger than the configured limit (413 / RESOURCE_EXHAUSTED).
    PayloadTooLarge,
    /// Valid request for a feature this server does not provide (501 / UNIMPLEMENTED).
    Unsupported,
    /// A conflicting object already exists (409 / ALREADY_EXISTS).
    AlreadyExists,
    /// The API is restricted and the request lacks its key (403 / PERMISSION_DENIED).
    PermissionDenied,
    /// A bug or an unexpected failure inside the server or a backend (500 / INTERNAL).
    Internal,
    /// The request was cancelled (its client went away, or it was cancelled in-process) before it
    /// was answered (400 as tritonserver's HTTP front-end answers it / CANCELLED).
    Cancelled,
}

/// An error with a kind and a full-sentence message meant for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Decides the status code.
    pub kind: ErrorKind,
    /// Shown to the client as `{"error": message}`.
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Cancelled, message)
    }

    /// The HTTP status code for this error (the only HTTP mapping in the server).
    pub fn http_status(&self) -> u16 {
        match self.kind {
            ErrorKind::InvalidArgument | ErrorKind::Cancelled => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::AlreadyExists => 409,
            ErrorKind::PermissionDenied => 403,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::Internal => 500,
            ErrorKind::Unsupported => 501,
            ErrorKind::Unavailable => 503,
        }
    }

    /// The gRPC status code number for this error (the only gRPC mapping in the server).
    pub fn grpc_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Cancelled => 1,        // CANCELLED
            ErrorKind::InvalidArgument => 3,  // INVALID_ARGUMENT
            ErrorKind::NotFound => 5,         // NOT_FOUND
            ErrorKind::AlreadyExists => 6,    // ALREADY_EXISTS
            ErrorKind::PermissionDenied => 7, // PERMISSION_DENIED
            ErrorKind::PayloadTooLarge => 8,  // RESOURCE_EXHAUSTED
            ErrorKind::Unsupported => 12,     // UNIMPLEMENTED
            ErrorKind::Internal => 13,        // INTERNAL
            ErrorKind::Unavailable => 14,     // UNAVAILABLE
        }
    }

    /// Prefixes the message with context, keeping the kind.
    pub fn context(mut self, prefix: impl fmt::Display) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
