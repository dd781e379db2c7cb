//! The importer's error type: one enum naming the failed operation, with a small stable [`ErrorKind`] that
//! callers (the CLI, pod mode, the controller through the termination message) branch on.

use std::io::{self, Read};
use std::path::PathBuf;

use contracts::errors::chain_line;

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
    /// The target is a file larger than its filesystem allows (`EFBIG`: ext4 with 4 KiB blocks caps files at
    /// 16 TiB).
    #[error(
        "target size {requested} bytes is larger than the largest file the target filesystem can hold ({max} bytes)"
    )]
    FileTooLarge {
        /// The size asked of the target file.
        requested: u64,
        /// The largest file size the target filesystem accepts.
        max: u64,
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
    /// The delegated `qemu-img` was stopped by a signal or a resource limit.
    #[error("qemu-img {operation} {stop}")]
    QemuImgStopped {
        /// The qemu-img subcommand.
        operation: &'static str,
        /// How it was stopped.
        stop: crate::format::qemu_process::Stop,
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
            Error::Decompress { .. }
            | Error::Format { .. }
            | Error::QemuImg { .. }
            | Error::QemuImgStopped { .. }
            | Error::ContainerImage(_) => ErrorKind::InvalidImage,
            Error::ChecksumMismatch { .. } => ErrorKind::Checksum,
            Error::SizeTooSmall { .. }
            | Error::TargetTooSmall { .. }
            | Error::FileTooLarge { .. }
            | Error::DataBeyondTarget { .. } => ErrorKind::Capacity,
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

    /// A capacity error whose message already states what the target can hold (the image is larger than the
    /// reported available storage, or than the largest file the filesystem takes), as opposed to one that only
    /// says a write ran out of space.
    pub fn states_target_limit(&self) -> bool {
        matches!(self, Error::TargetTooSmall { .. } | Error::DataBeyondTarget { .. } | Error::FileTooLarge { .. })
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

// The error plumbing of the pipeline: an [`Error`] raised inside a `Read` implementation (a source, a decoder, a
// format reader) travels through the `io::Read` layers as an `io::Error` ([`tag`]) and is recovered unchanged
// at the edge ([`untag`]); [`Tagger`] turns a layer's own I/O errors into the right [`Error`] on the way.

/// Wraps `e` so it survives a trip through `io::Read` layers; [`untag`] recovers it.
pub fn tag(e: Error) -> io::Error {
    io::Error::other(e)
}

/// Recovers an [`Error`] carried in an `io::Error` by [`tag`]; anything else becomes a source read error.
pub fn untag(e: io::Error, offset: u64) -> Error {
    if e.get_ref().is_some_and(|i| i.is::<Error>()) {
        if let Some(inner) = e.into_inner()
            && let Ok(err) = inner.downcast::<Error>()
        {
            return *err;
        }
        return Error::SourceRead { offset, source: io::Error::other("lost error") };
    }
    Error::SourceRead { offset, source: e }
}

/// Recovers an [`Error`] carried in an `io::Error` by [`tag`]; anything else is mapped by `f`.
pub fn untag_or(e: io::Error, f: impl FnOnce(io::Error) -> Error) -> Error {
    if e.get_ref().is_some_and(|i| i.is::<Error>()) {
        return untag(e, 0);
    }
    f(e)
}

/// A reader that maps the untagged errors of the inner reader with `f` (given the error and the bytes read so
/// far) and passes tagged ones through.
pub struct Tagger<R, F> {
    inner: R,
    pos: u64,
    f: F,
}

impl<R, F> Tagger<R, F> {
    /// Wraps `inner`; its errors become `f(error, offset)`.
    pub fn new(inner: R, f: F) -> Self {
        Tagger { inner, pos: 0, f }
    }
}

impl<R: Read, F: FnMut(io::Error, u64) -> Error> Read for Tagger<R, F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.pos += n as u64;
                Ok(n)
            }
            Err(e) if e.get_ref().is_some_and(|i| i.is::<Error>()) => Err(e),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => Err(tag((self.f)(e, self.pos))),
        }
    }
}
