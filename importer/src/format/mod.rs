//! Image formats. Raw (and ISO) stream straight through; qcow2 ([`qcow2`]) and streamOptimized vmdk
//! ([`vmdk`]) are converted natively in one pass; an OVA ([`ova`]) is read as a stream up to the disk it
//! imports, which is converted by those same paths; vhd ([`vhd`]) and vhdx ([`vhdx`]) are read natively by
//! positional reads ([`positional`]) of the source or of a spooled copy; other vmdk and vdi are delegated to
//! `qemu-img` on a seekable local file ([`qemu_img`]). Images of the formats with child forms are checked for a
//! parent image from their own bytes first ([`parent`]).

use std::io::Read;

use crate::detect::ImageFormat;
use crate::sink::Sink;
use crate::{Error, Result};

pub mod ova;
pub mod parent;
pub mod positional;
pub mod qcow2;
pub mod qemu_img;
pub mod qemu_process;
pub mod vhd;
pub mod vhdx;
pub mod vmdk;

/// A format-level problem with the image.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A qcow2 problem.
    #[error(transparent)]
    Qcow2(#[from] qcow2::Qcow2Error),
    /// A streamOptimized vmdk problem.
    #[error(transparent)]
    Vmdk(#[from] vmdk::VmdkError),
    /// An OVA problem.
    #[error(transparent)]
    Ova(#[from] ova::OvaError),
    /// A VHD (vpc) problem.
    #[error(transparent)]
    Vhd(#[from] vhd::VhdError),
    /// A VHDX problem.
    #[error(transparent)]
    Vhdx(#[from] vhdx::VhdxError),
    /// The image uses a feature the importer refuses.
    #[error("{0}")]
    Refused(String),
    /// The image is the child of another image (a differencing or delta disk): refused.
    #[error(transparent)]
    Parent(#[from] parent::ParentRef),
    /// The image is malformed.
    #[error("{0}")]
    Invalid(String),
}

/// Copies a raw stream into the sink, read straight into the sink's buffers. Fails as soon as data would
/// land at or beyond `limit`. Returns the image size (bytes read).
pub fn copy_raw(stream: &mut dyn Read, sink: &mut dyn Sink, limit: Option<u64>) -> Result<u64> {
    const CHUNK: u64 = 2 << 20;
    let mut pos = 0u64;
    loop {
        let max = match limit {
            Some(l) if pos >= l => {
                // The target is full: the image must end here.
                let mut probe = [0u8; 1];
                let more = read_full(stream, &mut probe).map_err(|e| crate::error::untag(e, pos))?;
                return if more == 0 { Ok(pos) } else { Err(Error::DataBeyondTarget { limit: l, offset: l }) };
            }
            Some(l) => (l - pos).min(CHUNK),
            None => CHUNK,
        };
        let at = pos;
        let n = sink
            .write_with(pos, max as usize, &mut |buf| read_full(stream, buf).map_err(|e| crate::error::untag(e, at)))?;
        if n == 0 {
            return Ok(pos);
        }
        pos += n as u64;
    }
}

/// Reads until `buf` is full or the stream ends.
pub fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
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

/// What a format header says without converting (used by `info` and for early size checks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Virtual size when the header states it.
    pub virtual_size: Option<u64>,
    /// Cluster (grain, block) size when the format has one.
    pub cluster_size: Option<u64>,
    /// A backing/parent image is referenced.
    pub backing_file: bool,
    /// An external data file is referenced.
    pub data_file: bool,
    /// The data is encrypted.
    pub encrypted: bool,
}

fn le32(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)?.try_into().ok().map(u32::from_le_bytes)
}
fn le64(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o + 8)?.try_into().ok().map(u64::from_le_bytes)
}
fn be32(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)?.try_into().ok().map(u32::from_be_bytes)
}
fn be64(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o + 8)?.try_into().ok().map(u64::from_be_bytes)
}

/// Reads what the first bytes of a non-qcow2 image tell (qcow2 has [`qcow2::Header`]).
pub fn peek_header(format: ImageFormat, head: &[u8]) -> HeaderInfo {
    match format {
        ImageFormat::Vmdk => HeaderInfo {
            virtual_size: le64(head, 12).map(|s| s.saturating_mul(512)),
            cluster_size: le64(head, 20).map(|s| s.saturating_mul(512)),
            ..HeaderInfo::default()
        },
        ImageFormat::Vdi => HeaderInfo {
            virtual_size: le64(head, 0x170),
            cluster_size: le32(head, 0x178).map(u64::from),
            backing_file: le32(head, 0x4c) == Some(4), // image type 4 = differencing
            ..HeaderInfo::default()
        },
        ImageFormat::Vpc => HeaderInfo {
            virtual_size: be64(head, 48),
            cluster_size: be32(head, 512 + 32).map(u64::from),
            backing_file: be32(head, 60) == Some(4), // disk type 4 = differencing
            ..HeaderInfo::default()
        },
        _ => HeaderInfo::default(),
    }
}
