//! `importer info`: what an image is, like `qemu-img info`, without converting it. Reads only the first
//! bytes of the (decompressed) stream; refused features are reported, not refused.

use serde::Serialize;

use crate::detect::ImageFormat;
use crate::format::qcow2::Header;
use crate::format::qcow2::header::Encryption;
use crate::format::{FormatError, HeaderInfo, peek_header, qemu_img};
use crate::pipeline::{compression_name, probe};
use crate::progress::Progress;
use crate::source::{SourceLocation, SourceOptions};
use crate::{Error, Result};

/// What `info` reports.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InfoReport {
    /// Detected format.
    pub format: ImageFormat,
    /// Compression wrappers, outermost first, `+`-joined, or `none`.
    pub compression: String,
    /// Virtual size, when it can be known without decompressing everything.
    pub virtual_size: Option<u64>,
    /// Cluster/grain/block size, when the format has one.
    pub cluster_size: Option<u64>,
    /// A backing/parent image is referenced.
    pub backing_file: bool,
    /// An external data file is referenced.
    pub data_file: bool,
    /// The image is encrypted.
    pub encrypted: bool,
    /// Size of the source as served, when known.
    pub source_size: Option<u64>,
}

/// Inspects `location`. Must run on a blocking thread inside the runtime of `rt`.
pub fn info(location: &SourceLocation, http: &SourceOptions, rt: &tokio::runtime::Handle) -> Result<InfoReport> {
    let p = probe(location, http, rt, &Progress::new(), None)?;
    let compressed = !p.compressions.is_empty();
    let compression = compression_name(&p.compressions);
    let hi = match p.format {
        ImageFormat::Qcow2 => {
            let h = Header::parse(&p.head, if compressed { None } else { p.size })
                .map_err(|e| Error::Format { format: ImageFormat::Qcow2, source: FormatError::Qcow2(e) })?;
            HeaderInfo {
                virtual_size: Some(h.virtual_size),
                cluster_size: Some(h.cluster_size()),
                backing_file: h.backing_file.is_some(),
                data_file: h.data_file,
                encrypted: h.encryption != Encryption::None,
            }
        }
        ImageFormat::Raw | ImageFormat::Iso | ImageFormat::Tar => {
            HeaderInfo { virtual_size: if compressed { None } else { p.size }, ..HeaderInfo::default() }
        }
        // The disk's size is in its own header, further into the archive.
        ImageFormat::Ova => HeaderInfo::default(),
        f => match (&p.local_path, compressed) {
            (Some(path), false) => {
                // qemu-img does not report every child form (a differencing VHD, for one), and cannot open
                // others (a VHDX with a parent): the bytes tell.
                let parent = qemu_img::parent_of(path, f)?.is_some();
                match qemu_img::info(path, f) {
                    Ok(qi) => HeaderInfo {
                        virtual_size: Some(qi.virtual_size),
                        cluster_size: qi.cluster_size,
                        backing_file: qi.backing_file.is_some() || parent,
                        data_file: false,
                        encrypted: qi.encrypted,
                    },
                    Err(_) if parent => HeaderInfo { backing_file: true, ..peek_header(f, &p.head) },
                    Err(e) => return Err(e),
                }
            }
            _ => peek_header(f, &p.head),
        },
    };
    Ok(InfoReport {
        format: p.format,
        compression,
        virtual_size: hi.virtual_size,
        cluster_size: hi.cluster_size,
        backing_file: hi.backing_file,
        data_file: hi.data_file,
        encrypted: hi.encrypted,
        source_size: p.size,
    })
}
