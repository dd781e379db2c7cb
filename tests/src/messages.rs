//! THE table of error-message substrings the end-to-end tests expect on the importer's final stderr line.
//!
//! Matching is case-insensitive and any one alternative of a list suffices. This is the only place the tests
//! spell out error wording: adjust here when the importer's messages change.

/// qcow2 with a backing file (`qemu-img create -b`).
pub const BACKING_FILE: &[&str] = &["backing file"];
/// qcow2 with an external data file (`-o data_file=...`).
pub const DATA_FILE: &[&str] = &["data file"];
/// A child image of a format delegated to qemu-img: differencing VHD/VHDX/VDI, VMDK delta (parentCID,
/// parentFileNameHint).
pub const PARENT_IMAGE: &[&str] = &["parent"];
/// qemu-img stopped by its address space limit.
pub const QEMU_IMG_OUT_OF_MEMORY: &[&str] = &["ran out of memory (address space limit"];
/// A virtual size larger than the target filesystem's largest file (ext4: 16 TiB).
pub const FILE_TOO_LARGE: &[&str] = &["larger than the largest file the target filesystem can hold"];
/// Encrypted qcow2 (AES crypt_method=1 or LUKS crypt_method=2).
pub const ENCRYPTED: &[&str] = &["encrypt"];
/// Unknown bits in the qcow2 incompatible-features field.
pub const INCOMPATIBLE_FEATURE: &[&str] = &["incompatible feature"];
/// qcow2 compression type byte with a value other than zlib (0) / zstd (1).
pub const COMPRESSION_TYPE: &[&str] = &["compression type"];
/// qcow2 version other than 2 or 3.
pub const VERSION: &[&str] = &["version"];
/// qcow2 cluster_bits outside 9..=21.
pub const CLUSTER_SIZE: &[&str] = &["cluster size", "cluster_bits", "cluster bits"];
/// A metadata table or data cluster that lies (partly) past the end of the source.
pub const BEYOND_END: &[&str] = &["beyond end", "beyond the end"];
/// A metadata table placed in the header cluster (offset 0).
pub const OVERLAPS_HEADER: &[&str] = &["overlaps the header", "into the header", "into the image header"];
/// A table offset that is not cluster-aligned.
pub const UNALIGNED: &[&str] = &["not aligned", "unaligned", "misaligned"];
/// Absurd table or virtual sizes; content larger than --size or the block device; --size below the image.
pub const TOO_LARGE: &[&str] = &[
    "too large",
    "exceeds",
    "too big",
    "smaller than",
    "larger than", // CDI: "... is larger than the reported available storage ... A larger PVC is required"
];
/// A source that ends early (compressed streams, headers).
pub const TRUNCATED: &[&str] = &["truncated"];
/// An image file cut short: the importer may notice either the short file or a pointer past its end.
pub const TRUNCATED_OR_BEYOND_END: &[&str] = &["truncated", "beyond end", "beyond the end"];
/// A compressed stream whose data is corrupt (bad CRC / invalid data).
pub const CORRUPT_STREAM: &[&str] = &["corrupt", "invalid", "crc", "checksum"];
/// Local source that does not exist.
pub const NOT_FOUND: &[&str] = &["no such file", "not found"];

/// HTTP status errors.
pub const HTTP_401: &[&str] = &["401"];
/// HTTP 403.
pub const HTTP_403: &[&str] = &["403"];
/// HTTP 404.
pub const HTTP_404: &[&str] = &["404"];
/// TLS verification failure.
pub const TLS_CERTIFICATE: &[&str] = &["certificate"];
/// Too many redirects.
pub const REDIRECTS: &[&str] = &["redirect"];
/// A download that stopped sending data for longer than --stall-timeout, on every attempt.
pub const STALLED: &[&str] = &["stall", "timed out", "timeout"];
/// A server that closes before sending Content-Length bytes, on every attempt.
pub const SHORT_BODY: &[&str] = &["truncated", "incomplete", "unexpected end", "premature", "closed", "end of file"];
/// qcow2 from a server without Range support and without --scratch: streaming is allowed, else it must say so.
pub const NEEDS_SCRATCH: &[&str] = &["scratch"];
/// A malformed --checksum argument.
pub const BAD_CHECKSUM_ARG: &[&str] = &["checksum"];

/// The checksum-mismatch line (the contract fixes its exact shape).
pub fn checksum_mismatch(algo: &str, expected: &str, calculated: &str) -> String {
    format!("checksum mismatch: expected {algo}:{expected}, calculated {algo}:{calculated}")
}

/// `--size` smaller than the virtual size: the message must name both sizes (in bytes).
pub fn size_too_small(virtual_size: u64, requested: u64) -> [String; 2] {
    [virtual_size.to_string(), requested.to_string()]
}
