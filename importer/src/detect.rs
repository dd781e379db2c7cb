//! Magic-byte detection of compression wrappers and image formats. Pure functions over a header prefix;
//! file names are never consulted.

use std::fmt;

use serde::Serialize;

/// Bytes of header needed for detection (the VDI magic sits at 0x40, tar's at 0x101).
pub const DETECT_LEN: usize = 512;

/// A compression wrapper around the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip (one or more members).
    Gzip,
    /// xz (one or more blocks/streams).
    Xz,
    /// Zstandard.
    Zstd,
    /// bzip2.
    Bzip2,
}

impl Compression {
    /// Detects a compression wrapper from the first bytes of a stream.
    pub fn detect(head: &[u8]) -> Option<Compression> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Compression::Gzip)
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Some(Compression::Xz)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Compression::Zstd)
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Some(Compression::Bzip2)
        } else {
            None
        }
    }

    /// Lower-case name as used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Bzip2 => "bzip2",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The on-disk format of the (decompressed) image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// Anything without a recognised magic: copied byte for byte.
    Raw,
    /// An ISO 9660 image (raw to qemu-img; reported separately for the user's benefit).
    Iso,
    /// QEMU copy-on-write v2/v3.
    Qcow2,
    /// VMware sparse / streamOptimized (`KDMV`).
    Vmdk,
    /// Virtual PC / VHD dynamic (`conectix`).
    Vpc,
    /// Hyper-V VHDX.
    Vhdx,
    /// VirtualBox VDI.
    Vdi,
    /// A tar archive (content type `archive`; refused as a disk image unless it is an OVA).
    Tar,
    /// An OVA: a tar archive whose first member is an OVF descriptor (see [`crate::format::ova`]). Told from
    /// [`ImageFormat::Tar`] by [`crate::format::ova::is_ova`] on the first bytes, after [`ImageFormat::detect`].
    Ova,
}

impl ImageFormat {
    /// Detects the format from the first bytes of the decompressed stream. `head` should hold
    /// [`DETECT_LEN`] bytes when the stream is that long. ISO needs 0x8006 bytes; see [`ImageFormat::is_iso`].
    pub fn detect(head: &[u8]) -> ImageFormat {
        if head.starts_with(b"QFI\xfb") {
            ImageFormat::Qcow2
        } else if head.starts_with(b"KDMV") {
            ImageFormat::Vmdk
        } else if head.starts_with(b"conectix") {
            ImageFormat::Vpc
        } else if head.starts_with(b"vhdxfile") {
            ImageFormat::Vhdx
        } else if head.len() >= 0x44 && head[0x40..0x44] == [0x7f, 0x10, 0xda, 0xbe] {
            ImageFormat::Vdi
        } else if head.len() >= 0x106 && &head[0x101..0x106] == b"ustar" {
            ImageFormat::Tar
        } else {
            ImageFormat::Raw
        }
    }

    /// Whether a raw image is an ISO 9660 filesystem (`CD001` at 0x8001).
    pub fn is_iso(head: &[u8]) -> bool {
        head.len() >= 0x8006 && &head[0x8001..0x8006] == b"CD001"
    }

    /// The name qemu-img uses for the format.
    pub fn qemu_name(self) -> &'static str {
        match self {
            ImageFormat::Raw | ImageFormat::Iso | ImageFormat::Tar | ImageFormat::Ova => "raw",
            ImageFormat::Qcow2 => "qcow2",
            ImageFormat::Vmdk => "vmdk",
            ImageFormat::Vpc => "vpc",
            ImageFormat::Vhdx => "vhdx",
            ImageFormat::Vdi => "vdi",
        }
    }

    /// Lower-case name as used in reports.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Iso => "iso",
            ImageFormat::Tar => "tar",
            ImageFormat::Ova => "ova",
            other => other.qemu_name(),
        }
    }
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressions() {
        assert_eq!(Compression::detect(&[0x1f, 0x8b, 8, 0]), Some(Compression::Gzip));
        assert_eq!(Compression::detect(b"\xfd7zXZ\x00\x00"), Some(Compression::Xz));
        assert_eq!(Compression::detect(&[0x28, 0xb5, 0x2f, 0xfd, 0]), Some(Compression::Zstd));
        assert_eq!(Compression::detect(b"BZh91AY"), Some(Compression::Bzip2));
        assert_eq!(Compression::detect(b"BZhx"), None);
        assert_eq!(Compression::detect(b"QFI\xfb"), None);
        assert_eq!(Compression::detect(b""), None);
        assert_eq!(Compression::detect(&[0x1f]), None);
    }

    #[test]
    fn formats() {
        let mut vdi = vec![0u8; 512];
        vdi[0x40..0x44].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        let mut tar = vec![0u8; 512];
        tar[0x101..0x106].copy_from_slice(b"ustar");
        let cases: [(&[u8], ImageFormat); 7] = [
            (b"QFI\xfb\0\0\0\x03", ImageFormat::Qcow2),
            (b"KDMV\x01", ImageFormat::Vmdk),
            (b"conectix\0", ImageFormat::Vpc),
            (b"vhdxfile", ImageFormat::Vhdx),
            (&vdi, ImageFormat::Vdi),
            (&tar, ImageFormat::Tar),
            (b"hello world", ImageFormat::Raw),
        ];
        for (head, want) in cases {
            assert_eq!(ImageFormat::detect(head), want, "{head:?}");
        }
        assert_eq!(ImageFormat::detect(b""), ImageFormat::Raw);
    }

    #[test]
    fn iso() {
        let mut iso = vec![0u8; 0x8800];
        assert!(!ImageFormat::is_iso(&iso));
        iso[0x8001..0x8006].copy_from_slice(b"CD001");
        assert!(ImageFormat::is_iso(&iso));
        assert!(!ImageFormat::is_iso(&iso[..0x8000]));
    }
}
