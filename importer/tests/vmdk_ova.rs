//! streamOptimized VMDK and OVA imports end to end through the library pipeline, from a non-seekable stream with
//! no scratch directory, compared byte for byte with `qemu-img convert -O raw` (the oracle). Images are made by
//! `qemu-img convert -O vmdk -o subformat=streamOptimized` from raw images with data patterns and holes; one is
//! built here in VMware's layout (grain tables after their grains, the grain directory in a footer) and read
//! by qemu-img too. OVAs are tars with an OVF written here. Hostile variants must fail with specific errors and
//! leave no target behind. A missing qemu-img fails the tests (scripts/install-deps.sh installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use importer::checksum::ExpectedChecksum;
use importer::plan::SizeRule;
use importer::progress::Progress;
use importer::source::{OpenedSource, SourceLocation, SourceOptions};
use importer::{ImportReport, ImportRequest, pipeline};
use sha2::{Digest, Sha256};

mod common;
use common::{MIB, noise, p, qemu_img, raw_image};
const GRAIN: usize = 64 << 10;

/// A test image: name, size, data pieces `(offset, bytes)`.
type Variant = (&'static str, u64, Vec<(u64, Vec<u8>)>);

/// The test images.
fn variants() -> Vec<Variant> {
    let text: Vec<u8> = b"streamOptimized grain text ".iter().copied().cycle().take(300_000).collect();
    vec![
        ("empty", 2 * MIB, vec![]),
        ("full", 3 * MIB, vec![(0, noise(1, 3 << 20))]),
        (
            "sparse",
            16 * MIB,
            vec![
                (0, noise(2, 4096)),
                (5 * MIB + 123, text.clone()),
                (9 * MIB - 10, noise(3, 20)),
                (12 * MIB, noise(4, 2 * MIB as usize + 7)),
                (16 * MIB - 4096, vec![0xab; 4096]),
            ],
        ),
        ("odd-grain", 3 * MIB + 4096, vec![(3 * MIB, noise(5, 4096)), (MIB, text.clone())]),
        ("odd-sector", 3 * MIB + 5000, vec![(3 * MIB + 4000, noise(6, 1000)), (100, noise(7, 100))]),
    ]
}

/// A work directory removed on drop.
fn workdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("importer-vmdk-").tempdir().unwrap()
}

/// Makes `<name>.vmdk` (streamOptimized) and its oracle `<name>.oracle` in `dir`.
fn make_vmdk(dir: &Path, name: &str, size: u64, pieces: &[(u64, Vec<u8>)]) -> (PathBuf, PathBuf) {
    let raw = dir.join(format!("{name}.raw"));
    let vmdk = dir.join(format!("{name}.vmdk"));
    let oracle = dir.join(format!("{name}.oracle"));
    raw_image(&raw, size, pieces);
    qemu_img(&["convert", "-f", "raw", "-O", "vmdk", "-o", "subformat=streamOptimized", p(&raw), p(&vmdk)]);
    qemu_img(&["convert", "-f", "vmdk", "-O", "raw", p(&vmdk), p(&oracle)]);
    (vmdk, oracle)
}

/// A reader that is only a reader: no seeking, no size, no path.
struct Stream(Box<dyn Read + Send>);

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Small, uneven reads, as a network body delivers them.
        let n = buf.len().min(50_000);
        self.0.read(&mut buf[..n])
    }
}

fn opened(bytes: Vec<u8>) -> OpenedSource {
    OpenedSource {
        stream: Box::new(Stream(Box::new(std::io::Cursor::new(bytes)))),
        size: None,
        random_access: None,
        local_path: None,
        image_env: Vec::new(),
        validator: None,
    }
}

struct Import {
    checksum: Option<String>,
    ova_disk: Option<String>,
}

fn import(bytes: Vec<u8>, dest: &Path, how: Import) -> importer::Result<ImportReport> {
    let req = ImportRequest {
        source: SourceLocation::File(PathBuf::from("test stream")),
        dest: dest.to_path_buf(),
        checksum: how.checksum.map(|c| c.parse::<ExpectedChecksum>().unwrap()),
        size: SizeRule::Virtual,
        preallocate: false,
        http: SourceOptions { ova_disk: how.ova_disk, ..SourceOptions::default() },
        scratch: None,
        resume: false,
    };
    pipeline::import_opened(&req, opened(bytes), &Progress::new())
}

fn plain(bytes: Vec<u8>, dest: &Path) -> importer::Result<ImportReport> {
    import(bytes, dest, Import { checksum: None, ova_disk: None })
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

#[test]
fn stream_optimized_variants_match_qemu_img() {
    let dir = workdir();
    for (name, size, pieces) in variants() {
        let (vmdk, oracle) = make_vmdk(dir.path(), name, size, &pieces);
        let dest = dir.path().join(format!("{name}.out"));
        let report = plain(fs::read(&vmdk).unwrap(), &dest).unwrap_or_else(|e| panic!("{name}: {}", e.one_line()));
        assert_eq!(report.strategy, "vmdk-stream", "{name}");
        assert_eq!(report.virtual_size, fs::metadata(&oracle).unwrap().len(), "{name}");
        assert_same(&dest, &oracle, name);
        // Holes stay holes: at most the data pieces (rounded to 4 KiB blocks) are allocated.
        let data: u64 = pieces.iter().map(|(_, d)| d.len() as u64 + 2 * 4096).sum();
        let allocated = fs::metadata(&dest).unwrap().blocks() * 512;
        assert!(allocated <= data, "{name}: {allocated} bytes allocated for {data} bytes of data");
    }
}

#[test]
fn compressed_stream_and_checksums_read_every_byte() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(2);
    let (vmdk, oracle) = make_vmdk(dir.path(), "sparse", size, &pieces);
    let bytes = fs::read(&vmdk).unwrap();
    // qemu-img pads its files far beyond the end-of-stream marker: a checksum only matches when those bytes
    // are read too.
    let dest = dir.path().join("sum.out");
    let good = Import { checksum: Some(format!("sha256:{}", sha256(&bytes))), ova_disk: None };
    let r = import(bytes.clone(), &dest, good).unwrap_or_else(|e| panic!("{}", e.one_line()));
    assert!(r.checksum.is_some());
    assert_same(&dest, &oracle, "with checksum");
    let bad = Import { checksum: Some(format!("sha256:{}", sha256(b"other"))), ova_disk: None };
    let e = import(bytes.clone(), &dest, bad).unwrap_err();
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    assert!(!dest.exists(), "a failed import leaves no target");

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bytes).unwrap();
    let gz = gz.finish().unwrap();
    let dest = dir.path().join("gz.out");
    let r = plain(gz, &dest).unwrap();
    assert_eq!((r.strategy, r.compression.as_str()), ("vmdk-stream", "gzip"));
    assert_same(&dest, &oracle, "gzip-wrapped");
}

// ----------------------------------------------------------------------------------------------------------
// VMware's layout: grain tables after their grains, the grain directory and a footer at the end
// ----------------------------------------------------------------------------------------------------------

fn pad(b: &mut Vec<u8>) {
    b.resize(b.len().next_multiple_of(512), 0);
}

fn header(capacity: u64, gd_offset: u64) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    b[0..4].copy_from_slice(b"KDMV");
    b[4..8].copy_from_slice(&3u32.to_le_bytes());
    b[8..12].copy_from_slice(&(1u32 | 1 << 16 | 1 << 17).to_le_bytes());
    b[12..20].copy_from_slice(&capacity.to_le_bytes());
    b[20..28].copy_from_slice(&128u64.to_le_bytes());
    b[28..36].copy_from_slice(&1u64.to_le_bytes());
    b[36..44].copy_from_slice(&20u64.to_le_bytes());
    b[44..48].copy_from_slice(&512u32.to_le_bytes());
    b[56..64].copy_from_slice(&gd_offset.to_le_bytes());
    b[64..72].copy_from_slice(&128u64.to_le_bytes());
    b[73..77].copy_from_slice(b"\n \r\n");
    b[77..79].copy_from_slice(&1u16.to_le_bytes());
    b
}

fn metadata_marker(b: &mut Vec<u8>, sectors: u64, kind: u32) {
    b.extend(sectors.to_le_bytes());
    b.extend(0u32.to_le_bytes());
    b.extend(kind.to_le_bytes());
    pad(b);
}

/// A streamOptimized image of `raw` in VMware's layout (every non-zero grain stored, ascending).
fn vmware_vmdk(raw: &[u8]) -> Vec<u8> {
    let capacity = (raw.len() as u64).div_ceil(512);
    let per_gt = 512 * GRAIN;
    let mut b = header(capacity, u64::MAX);
    let desc = format!(
        "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"streamOptimized\"\n\n\
         # Extent description\nRDONLY {capacity} SPARSE \"generated-stream.vmdk\"\n"
    );
    b.extend(desc.as_bytes());
    b.resize(128 * 512, 0);
    let mut gd = Vec::new();
    for (t, table) in raw.chunks(per_gt).enumerate() {
        let mut gt = vec![0u32; 512];
        for (i, grain) in table.chunks(GRAIN).enumerate() {
            if grain.iter().all(|&x| x == 0) {
                continue;
            }
            gt[i] = (b.len() / 512) as u32;
            let lba = ((t * per_gt + i * GRAIN) / 512) as u64;
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(grain).unwrap();
            let z = z.finish().unwrap();
            b.extend(lba.to_le_bytes());
            b.extend((z.len() as u32).to_le_bytes());
            b.extend(z);
            pad(&mut b);
        }
        metadata_marker(&mut b, 4, 1);
        gd.push((b.len() / 512) as u32);
        b.extend(gt.iter().flat_map(|e| e.to_le_bytes()));
    }
    metadata_marker(&mut b, (gd.len() as u64 * 4).div_ceil(512), 2);
    let gd_sector = (b.len() / 512) as u64;
    b.extend(gd.iter().flat_map(|e| e.to_le_bytes()));
    pad(&mut b);
    metadata_marker(&mut b, 1, 3);
    b.extend(header(capacity, gd_sector));
    metadata_marker(&mut b, 0, 0);
    b
}

#[test]
fn vmware_layout_with_footer_matches_qemu_img() {
    let dir = workdir();
    let raw_path = dir.path().join("vmware.raw");
    let size = 40 * MIB + 3 * 512; // two grain tables, a partial last grain
    raw_image(&raw_path, size, &[(0, noise(8, 70_000)), (33 * MIB + 5, noise(9, 5000)), (size - 700, vec![7; 700])]);
    let raw = fs::read(&raw_path).unwrap();
    let vmdk = dir.path().join("vmware.vmdk");
    fs::write(&vmdk, vmware_vmdk(&raw)).unwrap();
    let oracle = dir.path().join("vmware.oracle");
    qemu_img(&["convert", "-f", "vmdk", "-O", "raw", p(&vmdk), p(&oracle)]);
    assert_eq!(fs::read(&oracle).unwrap(), raw, "the hand-made image is what qemu-img reads");
    let dest = dir.path().join("vmware.out");
    let r = plain(fs::read(&vmdk).unwrap(), &dest).unwrap_or_else(|e| panic!("{}", e.one_line()));
    assert_eq!(r.strategy, "vmdk-stream");
    assert_same(&dest, &oracle, "VMware layout");
}

// ----------------------------------------------------------------------------------------------------------
// OVA
// ----------------------------------------------------------------------------------------------------------

fn ovf(files: &[(&str, &str, Option<&str>)]) -> String {
    let refs: String = files
        .iter()
        .enumerate()
        .map(|(i, (href, _, comp))| {
            let c = comp.map(|c| format!(" ovf:compression=\"{c}\"")).unwrap_or_default();
            format!("    <File ovf:href=\"{href}\" ovf:id=\"file{}\"{c}/>\n", i + 1)
        })
        .collect();
    let disks: String = files
        .iter()
        .enumerate()
        .map(|(i, (_, id, _))| {
            format!(
                "    <Disk ovf:capacity=\"1\" ovf:capacityAllocationUnits=\"byte * 2^30\" ovf:diskId=\"{id}\" \
                 ovf:fileRef=\"file{}\" ovf:format=\"http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized\"/>\n",
                i + 1
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <Envelope vmw:buildId=\"build-1\" xmlns=\"http://schemas.dmtf.org/ovf/envelope/1\" \
         xmlns:ovf=\"http://schemas.dmtf.org/ovf/envelope/1\" xmlns:vmw=\"http://www.vmware.com/schema/ovf\">\n\
         \x20 <References>\n{refs}  </References>\n\
         \x20 <DiskSection>\n    <Info>Virtual disk information</Info>\n{disks}  </DiskSection>\n\
         \x20 <VirtualSystem ovf:id=\"vm\">\n    <Info>A virtual machine</Info>\n  </VirtualSystem>\n</Envelope>\n"
    )
}

fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[test]
fn ova_imports_the_first_or_the_named_disk() {
    let dir = workdir();
    let vs = variants();
    let (vmdk1, oracle1) = make_vmdk(dir.path(), "d1", vs[2].1, &vs[2].2);
    let (vmdk2, oracle2) = make_vmdk(dir.path(), "d2", vs[4].1, &vs[4].2);
    let (d1, d2) = (fs::read(&vmdk1).unwrap(), fs::read(&vmdk2).unwrap());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&d2).unwrap();
    let d3 = gz.finish().unwrap();
    let text = ovf(&[
        ("vm-disk1.vmdk", "vmdisk1", None),
        ("vm-disk2.vmdk", "vmdisk2", None),
        ("vm-disk3.vmdk.gz", "vmdisk3", Some("gzip")),
    ]);
    let ova = tar_of(&[
        ("vm.ovf", text.as_bytes()),
        ("vm.mf", b"SHA256(vm.ovf)= 00\n"),
        ("vm-disk1.vmdk", &d1),
        ("vm-disk2.vmdk", &d2),
        ("vm-disk3.vmdk.gz", &d3),
    ]);

    let dest = dir.path().join("ova.out");
    let r = plain(ova.clone(), &dest).unwrap_or_else(|e| panic!("{}", e.one_line()));
    assert_eq!((r.format.to_string().as_str(), r.strategy), ("ova", "ova-stream"));
    assert_same(&dest, &oracle1, "first disk");
    for name in ["vmdisk2", "vm-disk2.vmdk", "file2", "vmdisk3"] {
        let how = Import { checksum: None, ova_disk: Some(name.to_string()) };
        import(ova.clone(), &dest, how).unwrap_or_else(|e| panic!("{name}: {}", e.one_line()));
        assert_same(&dest, &oracle2, name);
    }
    // every byte of the OVA is hashed, members after the disk included
    let how = Import { checksum: Some(format!("sha256:{}", sha256(&ova))), ova_disk: Some("vmdisk2".into()) };
    import(ova.clone(), &dest, how).unwrap_or_else(|e| panic!("{}", e.one_line()));
    assert_same(&dest, &oracle2, "with checksum");

    let how = Import { checksum: None, ova_disk: Some("vmdisk9".into()) };
    let e = import(ova.clone(), &dest, how).unwrap_err().to_string();
    assert!(e.contains("no disk \"vmdisk9\"") && e.contains("vmdisk2 (vm-disk2.vmdk)"), "{e}");
    assert!(!dest.exists());

    // a disk the OVF names but the archive lacks; a tar that is not an OVA
    let short = tar_of(&[("vm.ovf", text.as_bytes()), ("vm-disk1.vmdk", &d1)]);
    let how = Import { checksum: None, ova_disk: Some("vmdisk2".into()) };
    let e = import(short, &dest, how).unwrap_err().to_string();
    assert!(e.contains("no member \"vm-disk2.vmdk\""), "{e}");
    let e = plain(tar_of(&[("disk.img", &d1)]), &dest).unwrap_err().to_string();
    assert!(e.contains("tar archive, not a disk image"), "{e}");
    // a monolithicSparse disk inside: refused, naming it
    let sparse = dir.path().join("ms.vmdk");
    qemu_img(&["convert", "-f", "vmdk", "-O", "vmdk", p(&vmdk1), p(&sparse)]);
    let ova = tar_of(&[("vm.ovf", text.as_bytes()), ("vm-disk1.vmdk", &fs::read(&sparse).unwrap())]);
    let e = plain(ova, &dest).unwrap_err().to_string();
    assert!(e.contains("not streamOptimized"), "{e}");
    // the OVA cut in the middle of the disk
    let ova = tar_of(&[("vm.ovf", text.as_bytes()), ("vm-disk1.vmdk", &d1)]);
    let e = plain(ova[..ova.len() * 2 / 5].to_vec(), &dest).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
    assert!(!dest.exists());
}

// ----------------------------------------------------------------------------------------------------------
// Hostile images
// ----------------------------------------------------------------------------------------------------------

#[test]
fn hostile_streams_fail_with_specific_errors() {
    let dir = workdir();
    let (_, size, pieces) = variants().swap_remove(2);
    let (vmdk, _) = make_vmdk(dir.path(), "h", size, &pieces);
    let good = fs::read(&vmdk).unwrap();
    let first = u64::from_le_bytes(good[64..72].try_into().unwrap()) as usize * 512; // the first grain marker
    let capacity = u64::from_le_bytes(good[12..20].try_into().unwrap());
    let patch = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    // The offset of the last grain marker: qemu-img writes no end-of-stream marker, so a stream cut there ends
    // cleanly at a marker boundary; its grain tables must tell.
    let mut last = first;
    let mut at = first;
    while at + 12 <= good.len() {
        let size = u32::from_le_bytes(good[at + 8..at + 12].try_into().unwrap()) as usize;
        if size == 0 {
            break;
        }
        last = at;
        at += (12 + size).next_multiple_of(512);
    }
    assert!(last > first, "the image has several grains");
    let dest = dir.path().join("h.out");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("cut at a grain boundary", good[..last].to_vec(), "truncated or inconsistent"),
        ("grain moved to a hole", patch(first, &(7 * MIB / 512).to_le_bytes()), "truncated or inconsistent"),
        ("truncated", good[..good.len() * 3 / 5].to_vec(), "truncated"),
        ("truncated in the header", good[..3000].to_vec(), "truncated"),
        ("lba beyond capacity", patch(first, &(capacity + 128).to_le_bytes()), "beyond the capacity"),
        ("unaligned lba", patch(first, &5u64.to_le_bytes()), "not aligned to the grain size"),
        ("oversize grain", patch(first + 8, &0x7fff_ffffu32.to_le_bytes()), "compressed grain at offset"),
        ("bad deflate", patch(first + 12, &[0xff, 0xff, 0xff, 0xff]), "is corrupt"),
        ("bad marker", patch(first + 8, &[0, 0, 0, 0, 9, 0, 0, 0]), "invalid marker"),
        (
            "parent",
            {
                let desc =
                    String::from_utf8_lossy(&good[512..1024]).replace("parentCID=ffffffff", "parentCID=0badc0de");
                patch(512, desc.as_bytes())
            },
            "parent",
        ),
    ];
    for (what, bytes, want) in cases {
        let e = plain(bytes, &dest).err().unwrap_or_else(|| panic!("{what}: imported"));
        let line = e.one_line();
        assert!(line.contains(want), "{what}: {line}");
        assert_eq!(e.kind(), importer::ErrorKind::InvalidImage, "{what}: {line}");
        assert!(!dest.exists(), "{what}: target left behind");
    }
    // A monolithicSparse vmdk from a stream is read by positional reads, which need scratch space there.
    let sparse = dir.path().join("ms.vmdk");
    qemu_img(&["convert", "-f", "vmdk", "-O", "vmdk", p(&vmdk), p(&sparse)]);
    let e = plain(fs::read(&sparse).unwrap(), &dest).unwrap_err();
    assert_eq!(e.kind(), importer::ErrorKind::ScratchRequired, "{}", e.one_line());
}
