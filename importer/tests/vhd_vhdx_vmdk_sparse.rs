//! VHD (vpc), VHDX and hosted sparse VMDK (monolithicSparse) imports end to end through the library pipeline, by positional reads of a local file, of
//! bytes in memory, and of a copy spooled to scratch from a plain (or gzip-wrapped) stream; compared byte for
//! byte with `qemu-img convert -O raw` (the oracle). Images are made by qemu-img from raw images with data
//! patterns and holes, in each subformat, with odd sizes and several block sizes; some are patched as other
//! tools write them (a Hyper-V creator). Hostile variants (truncated, BAT entries beyond the file, huge tables,
//! overlapping blocks, damaged headers, a log to replay, differencing states) must fail with specific errors and
//! leave no target behind. A missing qemu-img fails the tests (scripts/install-deps.sh installs it).
//!
//! VMDK descriptor files (monolithicFlat, split images) stay with qemu-img: see the README's decision tree.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use importer::checksum::ExpectedChecksum;
use importer::format::positional::crc32c;
use importer::plan::SizeRule;
use importer::progress::Progress;
use importer::source::{MemoryAccess, OpenedSource, SourceLocation, SourceOptions};
use importer::{ImportReport, ImportRequest, pipeline};
use sha2::{Digest, Sha256};

mod common;
use common::{MIB, noise, p, qemu_img, raw_image};

/// A test image: name, size, data pieces `(offset, bytes)`.
type Variant = (&'static str, u64, Vec<(u64, Vec<u8>)>);

fn variants() -> Vec<Variant> {
    let text: Vec<u8> = b"vhd and vhdx block text ".iter().copied().cycle().take(300_000).collect();
    vec![
        ("empty", 3 * MIB, vec![]),
        ("full", 5 * MIB, vec![(0, noise(1, 5 << 20))]),
        (
            "sparse",
            40 * MIB,
            vec![
                (0, noise(2, 4096)),
                (5 * MIB + 123, text.clone()),
                (9 * MIB - 10, noise(3, 20)),
                (17 * MIB, noise(4, 2 * MIB as usize + 7)),
                (40 * MIB - 4096, vec![0xab; 4096]),
            ],
        ),
        ("odd-sector", 3 * MIB + 5000, vec![(3 * MIB + 4000, noise(6, 1000)), (100, noise(7, 100))]),
        ("odd-size", 10_000_000, vec![(9_000_000, text.clone()), (MIB, noise(8, 70_000))]),
    ]
}

fn workdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("importer-vhd-").tempdir().unwrap()
}

/// Converts `raw` with `qemu-img convert -O <fmt> -o <opts>` into `<name>` and makes its oracle.
fn make(dir: &Path, raw: &Path, name: &str, fmt: &str, opts: &str) -> (PathBuf, PathBuf) {
    let img = dir.join(name);
    let mut args = vec!["convert", "-f", "raw", "-O", fmt];
    if !opts.is_empty() {
        args.extend(["-o", opts]);
    }
    args.extend([p(raw), p(&img)]);
    qemu_img(&args);
    (img.clone(), oracle(dir, &img))
}

/// `qemu-img convert -O raw` of `img` (format probed, as the importer's contract says).
fn oracle(dir: &Path, img: &Path) -> PathBuf {
    let out = dir.join(format!("{}.oracle", img.file_name().unwrap().to_string_lossy()));
    let _ = fs::remove_file(&out);
    qemu_img(&["convert", "-O", "raw", p(img), p(&out)]);
    out
}

/// A reader that is only a reader: no seeking, no size, no path.
struct Stream(Box<dyn Read + Send>);

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(50_000);
        self.0.read(&mut buf[..n])
    }
}

/// How the test source offers the image.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// `source::file::open`: a local file with positional reads.
    File,
    /// A stream with positional reads over the same bytes (an HTTP source with Range).
    Ranged,
    /// A plain stream, spooled to a scratch directory.
    Spooled,
}

struct Run {
    via: Via,
    checksum: Option<String>,
    scratch: Option<PathBuf>,
}

fn import(img: &Path, dest: &Path, run: Run) -> importer::Result<ImportReport> {
    let bytes = fs::read(img).unwrap();
    let opened = match run.via {
        Via::File => importer::source::file::open(img).unwrap(),
        Via::Ranged => OpenedSource {
            stream: Box::new(Stream(Box::new(std::io::Cursor::new(bytes.clone())))),
            size: Some(bytes.len() as u64),
            random_access: Some(Arc::new(MemoryAccess(bytes))),
            local_path: None,
            image_env: Vec::new(),
            validator: None,
        },
        Via::Spooled => stream_of(bytes),
    };
    import_opened(opened, dest, run.checksum, run.scratch)
}

fn stream_of(bytes: Vec<u8>) -> OpenedSource {
    OpenedSource {
        stream: Box::new(Stream(Box::new(std::io::Cursor::new(bytes)))),
        size: None,
        random_access: None,
        local_path: None,
        image_env: Vec::new(),
        validator: None,
    }
}

fn import_opened(
    opened: OpenedSource,
    dest: &Path,
    checksum: Option<String>,
    scratch: Option<PathBuf>,
) -> importer::Result<ImportReport> {
    let req = ImportRequest {
        source: SourceLocation::File(PathBuf::from("test source")),
        dest: dest.to_path_buf(),
        checksum: checksum.map(|c| c.parse::<ExpectedChecksum>().unwrap()),
        size: SizeRule::Virtual,
        preallocate: false,
        http: SourceOptions::default(),
        scratch,
        resume: false,
    };
    pipeline::import_opened(&req, opened, &Progress::new())
}

fn assert_same(dest: &Path, oracle: &Path, what: &str) {
    let (got, want) = (fs::read(dest).unwrap(), fs::read(oracle).unwrap());
    assert_eq!(got.len(), want.len(), "{what}: size");
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {i}");
    }
}

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Imports `img` every way and compares with its oracle; `strategy` is what a seekable source reports.
fn check_all_ways(dir: &Path, img: &Path, oracle: &Path, strategy: &str, pieces: &[(u64, Vec<u8>)]) {
    let name = img.file_name().unwrap().to_string_lossy().to_string();
    let scratch = dir.join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    for via in [Via::File, Via::Ranged, Via::Spooled] {
        let dest = dir.join(format!("{name}.{via:?}.out"));
        let run = Run { via, checksum: None, scratch: Some(scratch.clone()) };
        let r = import(img, &dest, run).unwrap_or_else(|e| panic!("{name} via {via:?}: {}", e.one_line()));
        let want = match via {
            Via::Spooled if strategy == "positional" => "scratch+positional",
            _ => strategy,
        };
        assert_eq!(r.strategy, want, "{name} via {via:?}");
        assert_eq!(r.virtual_size, fs::metadata(oracle).unwrap().len(), "{name}");
        assert_same(&dest, oracle, &format!("{name} via {via:?}"));
        if strategy == "positional" {
            // Holes stay holes: at most the data pieces (rounded to 4 KiB blocks) are allocated.
            let data: u64 = pieces.iter().map(|(_, d)| d.len() as u64 + 2 * 4096).sum();
            let allocated = fs::metadata(&dest).unwrap().blocks() * 512;
            assert!(allocated <= data, "{name}: {allocated} bytes allocated for {data} bytes of data");
        }
        fs::remove_file(&dest).unwrap();
        assert_eq!(fs::read_dir(&scratch).unwrap().count(), 0, "{name}: scratch files left behind");
    }
}

#[test]
fn vhd_subformats_match_qemu_img() {
    let dir = workdir();
    for (name, size, pieces) in variants() {
        let raw = dir.path().join(format!("{name}.raw"));
        raw_image(&raw, size, &pieces);
        let (img, want) = make(dir.path(), &raw, &format!("{name}.vhd"), "vpc", "");
        check_all_ways(dir.path(), &img, &want, "positional", &pieces);
        let (img, want) = make(dir.path(), &raw, &format!("{name}-sz.vhd"), "vpc", "force_size=on");
        check_all_ways(dir.path(), &img, &want, "positional", &pieces);
        // A fixed VHD has its footer only at the end: qemu-img probes it as raw, and so does the importer.
        let (img, want) = make(dir.path(), &raw, &format!("{name}-fixed.vhd"), "vpc", "subformat=fixed");
        check_all_ways(dir.path(), &img, &want, "stream", &pieces);
    }
}

#[test]
fn vhdx_subformats_match_qemu_img() {
    let dir = workdir();
    for (name, size, pieces) in variants() {
        let raw = dir.path().join(format!("{name}.raw"));
        raw_image(&raw, size, &pieces);
        for (tag, opts) in [
            ("dyn", ""),
            ("1m", "block_size=1M"),
            ("32m", "block_size=32M"),
            ("fixed", "subformat=fixed"),
            ("zero", "block_state_zero=on"),
        ] {
            let (img, want) = make(dir.path(), &raw, &format!("{name}-{tag}.vhdx"), "vhdx", opts);
            check_all_ways(dir.path(), &img, &want, "positional", &pieces);
        }
    }
}

#[test]
fn vmdk_monolithic_sparse_matches_qemu_img() {
    let dir = workdir();
    for (name, size, pieces) in variants() {
        let raw = dir.path().join(format!("{name}.raw"));
        raw_image(&raw, size, &pieces);
        for (tag, opts) in [
            ("sparse", "subformat=monolithicSparse"),
            ("zeroed", "subformat=monolithicSparse,zeroed_grain=on"),
            ("v6", "subformat=monolithicSparse,hwversion=6"),
        ] {
            let (img, want) = make(dir.path(), &raw, &format!("{name}-{tag}.vmdk"), "vmdk", opts);
            check_all_ways(dir.path(), &img, &want, "positional", &pieces);
        }
    }
    // A hostile one: a grain table entry past the end of the file (a truncated image) is refused, nothing left.
    let raw = dir.path().join("h.raw");
    raw_image(&raw, 3 * MIB, &[(0, noise(9, 70_000))]);
    let (img, _) = make(dir.path(), &raw, "h.vmdk", "vmdk", "");
    let b = fs::read(&img).unwrap();
    let gd = u64::from_le_bytes(b[56..64].try_into().unwrap()) as usize * 512;
    let gt = u32::from_le_bytes(b[gd..gd + 4].try_into().unwrap()) as usize * 512;
    let mut bad = b.clone();
    bad[gt..gt + 4].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    refused(dir.path(), "vmdk-grain-beyond", bad, &["a grain at sector 16777215", "the image is truncated"]);
}

// ----------------------------------------------------------------------------------------------------------
// patched as other tools write them
// ----------------------------------------------------------------------------------------------------------

/// The VHD footer checksum: the one's complement of the byte sum with the field zeroed.
fn vhd_footer_checksum(f: &mut [u8]) {
    f[64..68].fill(0);
    let sum: u32 = f.iter().map(|&b| u32::from(b)).sum();
    f[64..68].copy_from_slice(&(!sum).to_be_bytes());
}

/// Rewrites both footers of a dynamic VHD with `patch`.
fn patch_vhd_footers(img: &Path, patch: impl Fn(&mut [u8])) {
    let f = fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let len = f.metadata().unwrap().len();
    for at in [0, len - 512] {
        let mut b = vec![0u8; 512];
        f.read_exact_at(&mut b, at).unwrap();
        patch(&mut b);
        vhd_footer_checksum(&mut b);
        f.write_all_at(&b, at).unwrap();
    }
}

#[test]
fn vhd_size_rule_follows_the_creator() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(4);
    let raw = dir.path().join("odd.raw");
    raw_image(&raw, size, &pieces);
    // qemu-img rounds 10_000_000 up to a CHS geometry; Hyper-V ("win ") and Virtual PC ("vpc ") images with a
    // current size below it are read by the creator's rule.
    for (creator, current) in [(b"win ", 9_999_872u64), (b"vpc ", 9_999_872), (b"d2v ", 5_000_192)] {
        let (img, _) = make(dir.path(), &raw, "creator.vhd", "vpc", "");
        patch_vhd_footers(&img, |f| {
            f[28..32].copy_from_slice(creator);
            f[48..56].copy_from_slice(&current.to_be_bytes());
        });
        let want = oracle(dir.path(), &img);
        let what = String::from_utf8_lossy(creator).to_string();
        if creator != b"vpc " {
            assert_eq!(fs::metadata(&want).unwrap().len(), current, "qemu-img sizes {what} by the current size");
        }
        let dest = dir.path().join("creator.out");
        import(&img, &dest, Run { via: Via::File, checksum: None, scratch: None }).unwrap();
        assert_same(&dest, &want, &what);
        fs::remove_file(&img).unwrap();
    }
}

// ----------------------------------------------------------------------------------------------------------
// checksums, compression, scratch
// ----------------------------------------------------------------------------------------------------------

#[test]
fn checksums_cover_the_source_and_compressed_images_are_spooled() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(2);
    let raw = dir.path().join("s.raw");
    raw_image(&raw, size, &pieces);
    let scratch = dir.path().join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    for (fmt, name) in [("vpc", "s.vhd"), ("vhdx", "s.vhdx")] {
        let (img, want) = make(dir.path(), &raw, name, fmt, "");
        let bytes = fs::read(&img).unwrap();
        let dest = dir.path().join(format!("{name}.out"));
        for via in [Via::File, Via::Ranged, Via::Spooled] {
            let good =
                Run { via, checksum: Some(format!("sha256:{}", sha256(&bytes))), scratch: Some(scratch.clone()) };
            let r = import(&img, &dest, good).unwrap_or_else(|e| panic!("{name} {via:?}: {}", e.one_line()));
            assert!(r.checksum.is_some());
            assert_same(&dest, &want, &format!("{name} with checksum via {via:?}"));
            let bad =
                Run { via, checksum: Some(format!("sha256:{}", sha256(b"other"))), scratch: Some(scratch.clone()) };
            let e = import(&img, &dest, bad).unwrap_err();
            assert!(e.to_string().contains("checksum mismatch"), "{e}");
            assert!(!dest.exists(), "a failed import leaves no target");
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        let gz = gz.finish().unwrap();
        let r = import_opened(stream_of(gz.clone()), &dest, None, Some(scratch.clone())).unwrap();
        assert_eq!((r.strategy, r.compression.as_str()), ("scratch+positional", "gzip"));
        assert_same(&dest, &want, &format!("{name}.gz"));
        fs::remove_file(&dest).unwrap();
        let e = import_opened(stream_of(gz), &dest, None, None).unwrap_err();
        assert!(e.to_string().contains("--scratch"), "{e}");
        assert!(!dest.exists());
        assert_eq!(fs::read_dir(&scratch).unwrap().count(), 0, "scratch files left behind");
    }
}

// ----------------------------------------------------------------------------------------------------------
// hostile images
// ----------------------------------------------------------------------------------------------------------

/// Imports `bytes` with positional reads; must fail naming one of `expect`, leaving nothing behind.
fn refused(dir: &Path, what: &str, bytes: Vec<u8>, expect: &[&str]) {
    let img = dir.join(format!("{what}.img"));
    fs::write(&img, bytes).unwrap();
    let dest = dir.join(format!("{what}.out"));
    for via in [Via::File, Via::Ranged] {
        let e = import(&img, &dest, Run { via, checksum: None, scratch: None }).map(|r| r.strategy).unwrap_err();
        let msg = e.to_string();
        assert!(expect.iter().any(|x| msg.contains(x)), "{what} via {via:?}: {msg}");
        assert!(!dest.exists(), "{what}: a failed import leaves no target");
    }
}

fn be32_at(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}

#[test]
fn hostile_vhd() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(2);
    let raw = dir.path().join("h.raw");
    raw_image(&raw, size, &pieces);
    let (img, _) = make(dir.path(), &raw, "h.vhd", "vpc", "");
    let ok = fs::read(&img).unwrap();
    let bat = u64::from_be_bytes(ok[512 + 16..512 + 24].try_into().unwrap()) as usize;
    let first = (0..20).map(|i| bat + 4 * i).find(|&e| be32_at(&ok, e) != u32::MAX).unwrap();
    let second = (first / 4 + 1..).map(|i| 4 * i).find(|&e| be32_at(&ok, e) != u32::MAX).unwrap();

    refused(dir.path(), "truncated", ok[..ok.len() * 6 / 10].to_vec(), &["truncated"]);
    let mut b = ok.clone();
    b[first..first + 4].copy_from_slice(&0x7fff_0000u32.to_be_bytes());
    refused(dir.path(), "bat-beyond", b, &["beyond the end"]);
    let mut b = ok.clone();
    b[512 + 28..512 + 32].copy_from_slice(&u32::MAX.to_be_bytes());
    refused(dir.path(), "huge-bat", b, &["BAT is too large"]);
    let mut b = ok.clone();
    let e: [u8; 4] = b[first..first + 4].try_into().unwrap();
    b[second..second + 4].copy_from_slice(&e);
    refused(dir.path(), "overlap", b, &["overlaps block"]);
    let mut b = ok.clone();
    b[first..first + 4].copy_from_slice(&1u32.to_be_bytes());
    refused(dir.path(), "over-metadata", b, &["overlaps the"]);
    let mut b = ok.clone();
    b[512 + 32..512 + 36].copy_from_slice(&1000u32.to_be_bytes());
    refused(dir.path(), "block-size", b, &["block size 1000"]);
    let mut b = ok.clone();
    b[60..64].copy_from_slice(&4u32.to_be_bytes());
    refused(dir.path(), "differencing", b, &["parent"]);
    let mut b = ok.clone();
    b[60..64].copy_from_slice(&9u32.to_be_bytes());
    refused(dir.path(), "disk-type", b, &["disk type 9"]);
    let mut b = ok.clone();
    b[512..520].copy_from_slice(b"notspars");
    refused(dir.path(), "dyn-header", b, &["cxsparse"]);
}

/// Offsets of a qemu-made VHDX: (BAT region offset, metadata region offset).
fn vhdx_regions(b: &[u8]) -> (usize, usize) {
    let t = &b[192 << 10..];
    let count = u32::from_le_bytes(t[8..12].try_into().unwrap()) as usize;
    let (mut bat, mut md) = (0, 0);
    for i in 0..count {
        let e = &t[16 + 32 * i..48 + 32 * i];
        let off = u64::from_le_bytes(e[16..24].try_into().unwrap()) as usize;
        if e[..4] == [0x66, 0x77, 0xc2, 0x2d] {
            bat = off;
        } else {
            md = off;
        }
    }
    (bat, md)
}

/// Re-checksums the 4 KiB header at `at`.
fn vhdx_header_checksum(b: &mut [u8], at: usize) {
    b[at + 4..at + 8].fill(0);
    let c = crc32c(&b[at..at + 4096]);
    b[at + 4..at + 8].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn hostile_vhdx() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(2);
    let raw = dir.path().join("h.raw");
    raw_image(&raw, size, &pieces);
    let (img, _) = make(dir.path(), &raw, "h.vhdx", "vhdx", "block_size=1M");
    let ok = fs::read(&img).unwrap();
    let (bat, _) = vhdx_regions(&ok);
    let entry = |b: &[u8], i: usize| u64::from_le_bytes(b[bat + 8 * i..bat + 8 * i + 8].try_into().unwrap());
    let present: Vec<usize> = (0..40).filter(|&i| entry(&ok, i) & 7 == 6).collect();
    assert!(present.len() >= 2, "test image has present blocks");
    let set = |b: &mut Vec<u8>, i: usize, v: u64| b[bat + 8 * i..bat + 8 * i + 8].copy_from_slice(&v.to_le_bytes());

    let mut cut = ok.clone();
    let last = (entry(&ok, *present.last().unwrap()) >> 20) as usize * MIB as usize;
    cut.truncate(last + 1000);
    refused(dir.path(), "truncated", cut, &["truncated"]);
    let mut b = ok.clone();
    set(&mut b, present[0], (1 << 40) | 6);
    refused(dir.path(), "bat-beyond", b, &["beyond the end"]);
    let mut b = ok.clone();
    let e = entry(&b, present[0]);
    set(&mut b, present[1], e);
    refused(dir.path(), "overlap", b, &["overlaps another block"]);
    let mut b = ok.clone();
    set(&mut b, present[0], 6);
    refused(dir.path(), "over-header", b, &["overlaps the header section"]);
    let mut b = ok.clone();
    let e = entry(&b, present[0]);
    set(&mut b, present[0], (e & !7) | 7);
    refused(dir.path(), "partially-present", b, &["partially present"]);
    let mut b = ok.clone();
    b[(64 << 10) + 100] ^= 1;
    b[(128 << 10) + 100] ^= 1;
    refused(dir.path(), "headers", b, &["no valid header"]);
    let mut b = ok.clone();
    b[(192 << 10) + 100] ^= 1;
    refused(dir.path(), "region-table", b, &["CRC-32C"]);
    let mut b = ok.clone();
    b[(192 << 10) + 8..(192 << 10) + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    b[(192 << 10) + 4..(192 << 10) + 8].fill(0);
    let c = crc32c(&b[192 << 10..256 << 10]);
    b[(192 << 10) + 4..(192 << 10) + 8].copy_from_slice(&c.to_le_bytes());
    refused(dir.path(), "huge-region-table", b, &["entries (at most 2047)"]);

    // A log entry of the header's log GUID with a valid checksum: the log must be replayed first.
    let mut b = ok.clone();
    let guid = [0x5au8; 16];
    for at in [64 << 10, 128 << 10] {
        b[at + 48..at + 64].copy_from_slice(&guid);
        vhdx_header_checksum(&mut b, at);
    }
    let log = u64::from_le_bytes(b[(64 << 10) + 72..(64 << 10) + 80].try_into().unwrap()) as usize;
    let mut entry_bytes = vec![0u8; 4096];
    entry_bytes[..4].copy_from_slice(b"loge");
    entry_bytes[8..12].copy_from_slice(&4096u32.to_le_bytes());
    entry_bytes[32..48].copy_from_slice(&guid);
    let c = crc32c(&entry_bytes);
    entry_bytes[4..8].copy_from_slice(&c.to_le_bytes());
    b[log + 8192..log + 12288].copy_from_slice(&entry_bytes);
    refused(dir.path(), "log", b.clone(), &["qemu-img check -r all"]);
    // The same GUID with a stale entry (bad checksum): nothing to replay, the image reads as before.
    b[log + 8192 + 100] ^= 1;
    let img2 = dir.path().join("stale-log.vhdx");
    fs::write(&img2, &b).unwrap();
    let dest = dir.path().join("stale-log.out");
    import(&img2, &dest, Run { via: Via::File, checksum: None, scratch: None }).unwrap();
    assert_same(&dest, &oracle(dir.path(), &img), "stale log");
}
