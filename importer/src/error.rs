//! The importer's error type: one enum naming the failed operation, with a small stable [`ErrorKind`] that
//! callers (the CLI, pod mode, the controller through the termination message) branch on.

use std::io;
use std::path::PathBuf;

use crate::format::FormatError;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Coarse classification of an [`Error`], stable across releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The source could not be reached or answered badly (DNS, TLS, HTTP status, connection).
    Connect,
    /// The image bytes are malformed, hostile or use a refused feature.
    InvalidImage,
    /// The source's checksum did not match the expected one. Fatal: retrying cannot help.
    Checksum,
    /// The target (or the requested size) cannot hold the image.
    Capacity,
    /// The import needs scratch space that was not provided or is too small.
    ScratchRequired,
    /// The request itself is invalid (bad flag value, unsupported URL scheme).
    InvalidRequest,
    /// Reading the source or writing the target failed.
    Io,
}

/// Everything that can make an import fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is invalid before any I/O.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Opening a local source failed.
    #[error("cannot open {}", path.display())]
    OpenSource {
        /// The local path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Talking to the source's server failed (CDI's "Unable to connect to <kind> data source" family).
    #[error("Unable to connect to {kind} data source: {url}: {message}")]
    Connect {
        /// `http`, `s3` or `registry`.
        kind: &'static str,
        /// The URL requested.
        url: String,
        /// What went wrong (status line or transport error chain).
        message: String,
    },
    /// Reading the source stream failed in the middle.
    #[error("reading the source failed at byte {offset}")]
    SourceRead {
        /// Source byte offset reached.
        offset: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Decompression failed (corrupt or truncated compressed stream).
    #[error("{} {compression} data", if is_truncation(source) { "truncated" } else { "corrupt" })]
    Decompress {
        /// The compression being decoded.
        compression: crate::detect::Compression,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The image format is invalid, hostile or refused.
    #[error("invalid {format} image: {source}")]
    Format {
        /// Detected format.
        format: crate::detect::ImageFormat,
        /// The format-specific problem.
        source: FormatError,
    },
    /// The checksum of the source bytes did not match.
    #[error("checksum mismatch: expected {expected}, calculated {calculated}")]
    ChecksumMismatch {
        /// `algo:hex` as requested.
        expected: String,
        /// `algo:hex` as computed.
        calculated: String,
    },
    /// `--size` is smaller than the image.
    #[error("requested size {requested} bytes is smaller than the image's virtual size {virtual_size} bytes")]
    SizeTooSmall {
        /// The requested size.
        requested: u64,
        /// The image's virtual size.
        virtual_size: u64,
    },
    /// The target cannot hold the image (block device or filesystem too small).
    #[error(
        "virtual image size {virtual_size} is larger than the reported available storage {available}. A larger PVC is required"
    )]
    TargetTooSmall {
        /// Bytes the image needs.
        virtual_size: u64,
        /// Bytes the target offers.
        available: u64,
    },
    /// The data produced by the source exceeds the target size (e.g. a decompression bomb).
    #[error(
        "image data is larger than the reported available storage {limit} (data at offset {offset}). A larger PVC is required"
    )]
    DataBeyondTarget {
        /// The target size.
        limit: u64,
        /// The first offending offset.
        offset: u64,
    },
    /// The import needs scratch space.
    #[error("scratch space required: {0}")]
    ScratchRequired(String),
    /// Writing the target failed.
    #[error("writing {} failed", path.display())]
    Sink {
        /// The target path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Using the scratch directory failed.
    #[error("scratch space {} failed", path.display())]
    Scratch {
        /// The scratch directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A registry image's layout is unusable (no disk file, more than one file under `disk/`, a malformed
    /// layer, a bootc image).
    #[error("invalid container image: {0}")]
    ContainerImage(String),
    /// The delegated `qemu-img` conversion failed.
    #[error("qemu-img {operation} failed: {message}")]
    QemuImg {
        /// The qemu-img subcommand.
        operation: &'static str,
        /// Its stderr, first lines.
        message: String,
    },
}

impl Error {
    /// The stable classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidRequest(_) => ErrorKind::InvalidRequest,
            Error::OpenSource { .. } | Error::Connect { .. } => ErrorKind::Connect,
            Error::SourceRead { .. } | Error::Sink { .. } | Error::Scratch { .. } => {
                if self.is_no_space() {
                    ErrorKind::Capacity
                } else {
                    ErrorKind::Io
                }
            }
            Error::Decompress { .. } | Error::Format { .. } | Error::QemuImg { .. } | Error::ContainerImage(_) => {
                ErrorKind::InvalidImage
            }
            Error::ChecksumMismatch { .. } => ErrorKind::Checksum,
            Error::SizeTooSmall { .. } | Error::TargetTooSmall { .. } | Error::DataBeyondTarget { .. } => {
                ErrorKind::Capacity
            }
            Error::ScratchRequired(_) => ErrorKind::ScratchRequired,
        }
    }

    fn is_no_space(&self) -> bool {
        let io = match self {
            Error::Sink { source, .. } | Error::Scratch { source, .. } => source,
            _ => return false,
        };
        matches!(io.raw_os_error(), Some(28) | Some(122)) // ENOSPC, EDQUOT
    }

    /// The error and its causes on one line, `outer: inner: innermost`, without repeating a cause already
    /// contained in its parent's text.
    pub fn one_line(&self) -> String {
        chain_line(self)
    }
}

/// Whether a decoder error means the compressed stream ended too early.
fn is_truncation(e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return true;
    }
    let m = e.to_string().to_ascii_lowercase();
    ["incomplete", "premature", "not finished", "eof", "truncated", "unexpected end"].iter().any(|p| m.contains(p))
}

/// Formats an error and its `source()` chain on one line, skipping causes whose text the parent already shows.
pub fn chain_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out.replace(['\n', '\r'], " ")
}
