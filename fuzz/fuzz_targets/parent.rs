//! Fuzzes the parent-image finder of the formats delegated to qemu-img (vhd, vhdx, vmdk, vdi) with arbitrary
//! image bytes, each input read as every one of those formats.
//!
//! Invariants checked beyond "no panic": the answer is the same when asked twice, and what a found parent
//! reference says (it goes into a one-line error message) is short and free of control characters.
#![no_main]

use importer::detect::ImageFormat;
use importer::format::parent;
use importer::source::MemoryAccess;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let image = MemoryAccess(data.to_vec());
    for format in [ImageFormat::Vpc, ImageFormat::Vhdx, ImageFormat::Vmdk, ImageFormat::Vdi] {
        let found = parent::find(format, &image).expect("reads from memory cannot fail");
        if let Some(p) = &found {
            for s in std::iter::once(&p.form).chain(p.parent.as_ref()) {
                assert!(s.chars().count() <= 512, "too long: {s:?}");
                assert!(!s.chars().any(char::is_control), "control characters: {s:?}");
            }
        }
        assert_eq!(found, parent::find(format, &image).expect("reads from memory cannot fail"), "not deterministic");
    }
});
