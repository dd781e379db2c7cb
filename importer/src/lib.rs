//! The disk import pipeline: a source (file, HTTP) → decompression (gzip, xz, zstd, bzip2, detected by
//! magic) → format conversion (raw/ISO streamed, qcow2 converted natively in one pass, vmdk/vhd/vhdx/vdi
//! by `qemu-img`) → a sparse target (file or block device), with checksum verification and live progress.
//!
//! ```text
//! SourceLocation ─► source::open ─► Progress tap ─► checksum tap ─► decompress* ─► detect
//!                                                                               │
//!                        plan::plan (pure) ◄─────────────────────────────────────┘
//!                              │
//!        Stream │ Qcow2 { Random | Spill } │ QemuImg { LocalFile | Spool }
//!                              │
//!          sink::Sink (writer thread; O_DIRECT blocks; file: holes; block: zeroing) ─► fsync
//! ```
//!
//! Entry points: [`pipeline::import`] and [`info::info`]; [`serve::serve`] is the source side of a host-assisted
//! clone (serves a volume's image read-only over HTTPS). The binary in `main.rs` only parses arguments.

pub mod checksum;
pub mod decompress;
pub mod detect;
pub mod error;
pub mod format;
pub mod info;
pub mod pipeline;
pub mod plan;
pub mod pod;
pub mod progress;
pub mod serve;
pub mod sink;
pub mod source;

pub use error::{Error, ErrorKind, Result};
pub use pipeline::{ImportReport, ImportRequest, import};
