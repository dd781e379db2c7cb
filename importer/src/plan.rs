//! The pure planning step: from what probing found, pick how the import runs, before any byte moves.
//!
//! Decision tree (documented in the README):
//!
//! ```text
//! format raw/iso ─────────────────────────────────────────────► Stream (single pass, any source)
//! format qcow2 ─┬─ uncompressed source with positional reads ──► Qcow2 { refetch: Random }   (no scratch)
//!               └─ otherwise ─────────────────────────────────► Qcow2 { refetch: Spill } (memory up to a
//!                                                                  bound, then the scratch directory; fails
//!                                                                  asking for scratch space without one)
//! vmdk with compressed grains + markers (streamOptimized) ─────► VmdkStream (single pass, any source, no scratch)
//! vpc (vhd), vhdx,
//! hosted sparse vmdk (monolithicSparse)
//!                  ┬─ uncompressed source with positional reads ► Seekable { input: Source } (native, no scratch)
//!                  ├─ --scratch given ────────────────────────► Seekable { input: Spool }  (native)
//!                  └─ otherwise ──────────────────────────────► error: scratch space required
//! other vmdk (descriptor files), vdi ┬─ uncompressed local file ► QemuImg { input: LocalFile }
//!                           ├─ --scratch given ───────────────► QemuImg { input: Spool }
//!                           └─ otherwise ─────────────────────► error: scratch space required
//! tar whose first member is an .ovf (OVA) ────────────────────► Ova (single pass to the chosen disk, any source)
//! other tar ──────────────────────────────────────────────────► error: an archive, not a disk image
//! ```

use crate::detect::ImageFormat;
use crate::format::FormatError;
use crate::format::vmdk::Layout as VmdkLayout;
use crate::{Error, Result};

/// Where a qcow2 conversion gets bytes that streamed past before they were mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefetchPlan {
    /// Positional reads of the source (file, HTTP Range).
    Random,
    /// A bounded in-memory store that overflows into the scratch directory, when there is one.
    Spill,
}

/// Where `qemu-img` reads the image from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelegateInput {
    /// The source file itself.
    LocalFile,
    /// A copy spooled to the scratch directory.
    Spool,
}

/// Where a native reader of a random-access format (vhd, vhdx) gets its positional reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekInput {
    /// The source's own (local file, HTTP Range, S3 ranged reads).
    Source,
    /// A copy spooled to the scratch directory.
    Spool,
}

/// How the import runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Copy the (decompressed) stream as is.
    Stream,
    /// Native single-pass qcow2 conversion.
    Qcow2 {
        /// Out-of-order fallback.
        refetch: RefetchPlan,
    },
    /// Native single-pass streamOptimized vmdk conversion (no scratch, any source).
    VmdkStream,
    /// An OVA: the stream is read up to the chosen disk's member, which is converted natively (streamOptimized
    /// vmdk, qcow2 with the spill fallback) or copied (raw).
    Ova,
    /// Native conversion of a random-access format (vhd, vhdx) by positional reads.
    Seekable {
        /// Where the positional reads go.
        input: SeekInput,
    },
    /// Conversion by `qemu-img`.
    QemuImg {
        /// Its input.
        input: DelegateInput,
    },
}

impl Plan {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Plan::Stream => "stream",
            Plan::Qcow2 { refetch: RefetchPlan::Random } => "qcow2-stream+range",
            Plan::Qcow2 { refetch: RefetchPlan::Spill } => "qcow2-stream",
            Plan::VmdkStream => "vmdk-stream",
            Plan::Ova => "ova-stream",
            Plan::Seekable { input: SeekInput::Source } => "positional",
            Plan::Seekable { input: SeekInput::Spool } => "scratch+positional",
            Plan::QemuImg { input: DelegateInput::LocalFile } => "qemu-img",
            Plan::QemuImg { input: DelegateInput::Spool } => "scratch+qemu-img",
        }
    }
}

/// What probing found that planning depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Detected format (after decompression).
    pub format: ImageFormat,
    /// Whether a compression wrapper was found.
    pub compressed: bool,
    /// Whether the source offers positional reads.
    pub random_access: bool,
    /// Whether the source is a local file.
    pub local_file: bool,
    /// Whether scratch space was given.
    pub scratch: bool,
    /// A vmdk's native kind ([`crate::format::vmdk::layout`]): streamOptimized or a hosted sparse extent; `None`
    /// for other vmdks (descriptor files) and other formats.
    pub vmdk: Option<VmdkLayout>,
}

/// Picks the plan. Pure.
pub fn plan(p: Probe) -> Result<Plan> {
    match p.format {
        ImageFormat::Raw | ImageFormat::Iso => Ok(Plan::Stream),
        ImageFormat::Tar => Err(Error::Format {
            format: ImageFormat::Tar,
            source: FormatError::Refused(String::from(
                "the source is a tar archive, not a disk image (archives are imported with content type archive)",
            )),
        }),
        ImageFormat::Ova => Ok(Plan::Ova),
        ImageFormat::Vmdk if p.vmdk == Some(VmdkLayout::StreamOptimized) => Ok(Plan::VmdkStream),
        ImageFormat::Qcow2 => Ok(Plan::Qcow2 {
            refetch: if p.random_access && !p.compressed { RefetchPlan::Random } else { RefetchPlan::Spill },
        }),
        ImageFormat::Vmdk if p.vmdk == Some(VmdkLayout::HostedSparse) => seekable(ImageFormat::Vmdk, p),
        f @ (ImageFormat::Vpc | ImageFormat::Vhdx) => seekable(f, p),
        f @ (ImageFormat::Vmdk | ImageFormat::Vdi) => {
            if p.local_file && !p.compressed {
                Ok(Plan::QemuImg { input: DelegateInput::LocalFile })
            } else if p.scratch {
                Ok(Plan::QemuImg { input: DelegateInput::Spool })
            } else {
                Err(Error::ScratchRequired(format!(
                    "{f} images are converted by qemu-img from a seekable file; pass --scratch DIR to spool this source there"
                )))
            }
        }
    }
}

/// The plan of a format read natively by positional reads: of the source when it offers them, else of a spooled
/// copy.
fn seekable(f: ImageFormat, p: Probe) -> Result<Plan> {
    if p.random_access && !p.compressed {
        Ok(Plan::Seekable { input: SeekInput::Source })
    } else if p.scratch {
        Ok(Plan::Seekable { input: SeekInput::Spool })
    } else {
        Err(Error::ScratchRequired(format!(
            "{f} images are read by positional reads, which this source does not offer (no Range support, or \
             compressed); pass --scratch DIR to spool it there"
        )))
    }
}

/// How the target is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SizeRule {
    /// The image's virtual size.
    #[default]
    Virtual,
    /// Exactly this size (CLI `--size`): grown with zeroes; smaller than the image is an error.
    Exact(u64),
    /// CDI's pod sizing: grow to `usable` (never shrink); an image larger than `available` is an error.
    Fill {
        /// Usable bytes (after filesystem overhead).
        usable: u64,
        /// Bytes the volume offers.
        available: u64,
    },
}

impl SizeRule {
    /// The most data that may be written before the image is known to be too large.
    pub fn limit(self) -> Option<u64> {
        match self {
            SizeRule::Virtual => None,
            SizeRule::Exact(n) => Some(n),
            SizeRule::Fill { available, .. } => Some(available),
        }
    }
}

/// Final target size for an image of `virtual_size` under `rule` on a target of `capacity` (block devices).
pub fn target_size(virtual_size: u64, rule: SizeRule, capacity: Option<u64>) -> Result<u64> {
    let size = match rule {
        SizeRule::Virtual => virtual_size,
        SizeRule::Exact(r) if r < virtual_size => return Err(Error::SizeTooSmall { requested: r, virtual_size }),
        SizeRule::Exact(r) => r,
        SizeRule::Fill { available, .. } if virtual_size > available => {
            return Err(Error::TargetTooSmall { virtual_size, available });
        }
        SizeRule::Fill { usable, .. } => usable.max(virtual_size),
    };
    if let Some(c) = capacity
        && size > c
    {
        return Err(Error::TargetTooSmall { virtual_size: size, available: c });
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vmdk: Option<VmdkLayout>, format: ImageFormat, flags: [bool; 4]) -> Result<Plan> {
        let [compressed, random_access, local_file, scratch] = flags;
        plan(Probe { format, compressed, random_access, local_file, scratch, vmdk })
    }

    fn p(format: ImageFormat, compressed: bool, random_access: bool, local_file: bool, scratch: bool) -> Result<Plan> {
        with(None, format, [compressed, random_access, local_file, scratch])
    }

    fn hs(format: ImageFormat, compressed: bool, random_access: bool, local_file: bool, scratch: bool) -> Result<Plan> {
        with(Some(VmdkLayout::HostedSparse), format, [compressed, random_access, local_file, scratch])
    }

    fn so(format: ImageFormat, compressed: bool, random_access: bool, local_file: bool, scratch: bool) -> Result<Plan> {
        with(Some(VmdkLayout::StreamOptimized), format, [compressed, random_access, local_file, scratch])
    }

    #[test]
    fn decision_tree() {
        use DelegateInput::*;
        use ImageFormat::*;
        use RefetchPlan::*;
        assert_eq!(p(Raw, true, false, false, false).ok(), Some(Plan::Stream));
        assert_eq!(p(Iso, false, true, true, false).ok(), Some(Plan::Stream));
        assert_eq!(p(Qcow2, false, true, false, false).ok(), Some(Plan::Qcow2 { refetch: Random }));
        assert_eq!(p(Qcow2, true, true, true, false).ok(), Some(Plan::Qcow2 { refetch: Spill }));
        assert_eq!(p(Qcow2, false, false, false, true).ok(), Some(Plan::Qcow2 { refetch: Spill }));
        assert_eq!(p(Vmdk, false, true, true, false).ok(), Some(Plan::QemuImg { input: LocalFile }));
        assert_eq!(p(Vdi, true, true, true, true).ok(), Some(Plan::QemuImg { input: Spool }));
        assert!(matches!(p(Vdi, false, true, false, false), Err(Error::ScratchRequired(_))));
        // vhd and vhdx: native by positional reads of the source, else of a spooled copy
        assert_eq!(p(Vhdx, false, true, false, false).ok(), Some(Plan::Seekable { input: SeekInput::Source }));
        assert_eq!(p(Vpc, false, true, true, false).ok(), Some(Plan::Seekable { input: SeekInput::Source }));
        assert_eq!(p(Vpc, true, true, true, true).ok(), Some(Plan::Seekable { input: SeekInput::Spool }));
        assert_eq!(p(Vhdx, false, false, false, true).ok(), Some(Plan::Seekable { input: SeekInput::Spool }));
        assert!(matches!(p(Vhdx, true, true, true, false), Err(Error::ScratchRequired(_))));
        assert!(matches!(p(Vpc, false, false, false, false), Err(Error::ScratchRequired(_))));
        assert!(p(Tar, false, true, true, true).is_err());
        // streamOptimized vmdk and OVA: native from any source, never scratch
        assert_eq!(so(Vmdk, false, false, false, false).ok(), Some(Plan::VmdkStream));
        assert_eq!(so(Vmdk, true, true, true, true).ok(), Some(Plan::VmdkStream));
        assert_eq!(p(Vmdk, false, false, false, true).ok(), Some(Plan::QemuImg { input: Spool }));
        assert_eq!(p(Ova, false, false, false, false).ok(), Some(Plan::Ova));
        // hosted sparse vmdk (monolithicSparse): native like vhd
        assert_eq!(hs(Vmdk, false, true, false, false).ok(), Some(Plan::Seekable { input: SeekInput::Source }));
        assert_eq!(hs(Vmdk, true, false, false, true).ok(), Some(Plan::Seekable { input: SeekInput::Spool }));
        assert!(matches!(hs(Vmdk, false, false, false, false), Err(Error::ScratchRequired(_))));
        assert_eq!(p(Ova, true, false, false, true).ok(), Some(Plan::Ova));
    }

    #[test]
    fn sizes() {
        assert_eq!(target_size(100, SizeRule::Virtual, None).ok(), Some(100));
        assert_eq!(target_size(100, SizeRule::Exact(200), Some(200)).ok(), Some(200));
        assert_eq!(target_size(100, SizeRule::Fill { usable: 150, available: 160 }, None).ok(), Some(150));
        assert_eq!(target_size(155, SizeRule::Fill { usable: 150, available: 160 }, None).ok(), Some(155));
        let e = target_size(170, SizeRule::Fill { usable: 150, available: 160 }, None).err().map(|e| e.to_string());
        assert!(e.unwrap_or_default().contains("is larger than the reported available storage 160"));
        let e = target_size(100, SizeRule::Exact(50), None).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("50") && e.contains("100"), "{e}");
        assert!(matches!(target_size(100, SizeRule::Virtual, Some(99)), Err(Error::TargetTooSmall { .. })));
    }
}
