//! The disk import pipeline: a source (file, HTTP, S3, registry, push) → decompression (gzip, xz, zstd, bzip2,
//! detected by magic) → format conversion (raw/ISO streamed; qcow2, streamOptimized vmdk and OVAs converted
//! natively in one pass; vhd and vhdx natively from positional reads; other vmdk and vdi by `qemu-img`) → a
//! sparse target (file or block device), with checksum verification, live progress and resuming after a kill
//! ([`resume`]).
//!
//! ```text
//! SourceLocation ─► source::open ─► Progress tap ─► checksum tap ─► decompress* ─► detect
//!                                                                               │
//!                        plan::plan (pure) ◄─────────────────────────────────────┘
//!                              │
//!   Stream │ Qcow2 { Random | Spill } │ VmdkStream │ Ova │ QemuImg { LocalFile | Spool }
//!                              │
//!          sink::Sink (writer thread; O_DIRECT blocks; file: holes; block: zeroing) ─► fsync
//! ```
//!
//! The pipeline's stages, in order: [`source`] (file, HTTP, S3, registry, push) → [`checksum`] and [`progress`]
//! taps → [`decompress`] → [`detect`] → [`plan`] (pure) → [`format`] (raw copy, native qcow2, native
//! streamOptimized vmdk, OVA, delegated `qemu-img`) → [`sink`]; [`pipeline`] runs them and [`error`] carries
//! failures through the `Read` layers.
//!
//! Entry points: [`pipeline::import`] and [`info::info`]. Around them: [`pod`] is CDI's importer pod (its
//! environment, target volume and sizing, archives, termination message, progress metrics), [`serve`] the source
//! side of a host-assisted clone. The binary in `main.rs`
//! only parses arguments.

#![deny(missing_docs)]

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
pub mod resume;
pub mod serve;
pub mod sink;
pub mod source;

pub use error::{Error, ErrorKind, Result};
pub use pipeline::{ImportReport, ImportRequest, import};
