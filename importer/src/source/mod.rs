//! Sources: where image bytes come from. A source yields one sequential byte stream from offset 0 and,
//! when it can, positional reads ([`RandomAccess`]) used to fetch pieces the stream delivered too early.
//! Sources do not decompress, report, read the environment or know the target.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::decompress::BoxRead;
use crate::{Error, Result};

pub mod file;
pub mod http;

pub use http::HttpOptions;

/// Positional reads of the source's bytes (as served, before decompression).
pub trait RandomAccess: Send + Sync {
    /// Total size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `offset`. Never returns short: bytes past the end of the source are
    /// zero-filled. Returns how many bytes came from the source (the rest are past its end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// Where the image comes from, as given on the command line or in `IMPORTER_ENDPOINT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLocation {
    /// A local file (a path or a `file://` URL).
    File(PathBuf),
    /// An `http://` or `https://` URL.
    Http(reqwest::Url),
}

impl SourceLocation {
    /// Parses a path, `file://`, `http://` or `https://` location.
    pub fn parse(s: &str) -> Result<Self> {
        if let Some((scheme, _)) = s.split_once("://") {
            let url = reqwest::Url::parse(s).map_err(|e| Error::InvalidRequest(format!("invalid URL {s:?}: {e}")))?;
            match scheme.to_ascii_lowercase().as_str() {
                "http" | "https" => Ok(SourceLocation::Http(url)),
                "file" => url
                    .to_file_path()
                    .map(SourceLocation::File)
                    .map_err(|()| Error::InvalidRequest(format!("invalid file URL {s:?}"))),
                other => Err(Error::InvalidRequest(format!(
                    "unsupported source scheme {other:?} in {s:?} (expected a path, file://, http:// or https://)"
                ))),
            }
        } else if s.is_empty() {
            Err(Error::InvalidRequest("empty source".into()))
        } else {
            Ok(SourceLocation::File(PathBuf::from(s)))
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceLocation::File(p) => write!(f, "{}", p.display()),
            SourceLocation::Http(u) => {
                let mut u = u.clone();
                let _ = u.set_password(None);
                write!(f, "{u}")
            }
        }
    }
}

/// An opened source.
pub struct OpenedSource {
    /// The bytes from offset 0, as served.
    pub stream: BoxRead,
    /// Total size when known (file size, `Content-Length`).
    pub size: Option<u64>,
    /// Positional reads, when the source supports them (local files; HTTP servers with Range).
    pub random_access: Option<Arc<dyn RandomAccess>>,
    /// The local path, for tools that need a seekable file (a local source only).
    pub local_path: Option<PathBuf>,
}

/// Opens `location`. HTTP needs a Tokio runtime handle; the returned stream and random access block on it,
/// so they must be used from a blocking thread.
pub fn open(location: &SourceLocation, http: &HttpOptions, rt: &tokio::runtime::Handle) -> Result<OpenedSource> {
    match location {
        SourceLocation::File(p) => file::open(p),
        SourceLocation::Http(u) => http::open(u, http, rt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_locations() {
        assert_eq!(SourceLocation::parse("/a/b.img").ok(), Some(SourceLocation::File("/a/b.img".into())));
        assert_eq!(SourceLocation::parse("rel.img").ok(), Some(SourceLocation::File("rel.img".into())));
        assert_eq!(SourceLocation::parse("file:///x/y%20z").ok(), Some(SourceLocation::File("/x/y z".into())));
        assert!(matches!(SourceLocation::parse("https://h:8443/p?q=1"), Ok(SourceLocation::Http(_))));
        assert!(matches!(SourceLocation::parse("HTTP://h/p"), Ok(SourceLocation::Http(_))));
        let e = SourceLocation::parse("ftp://h/x").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("unsupported source scheme"), "{e}");
        assert!(SourceLocation::parse("").is_err());
        assert!(SourceLocation::parse("http://").is_err());
    }

    #[test]
    fn display_hides_password() {
        let l = SourceLocation::parse("http://u:secret@h/x").unwrap_or_else(|e| panic!("{e}"));
        assert!(!l.to_string().contains("secret"));
    }
}
