//! Fuzzes the streamOptimized VMDK converter and the OVA reader with arbitrary bytes: every input is read as a
//! VMDK stream (when its header parses) and as an OVA (tar → OVF → the first disk's member, converted when it is
//! a streamOptimized VMDK).
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers a
//! guest byte twice, and when it succeeds it has covered every guest byte exactly once.
#![no_main]

use std::io::Read;

use importer::format::{ova, vmdk};
use libfuzzer_sys::fuzz_target;

#[path = "common/checking.rs"]
mod checking;
use checking::Checking;

/// Converts a VMDK stream whose first bytes are `head` (the stream yields them again).
fn convert(head: &[u8], stream: &mut dyn Read) -> importer::Result<()> {
    let Ok(h) = vmdk::Header::parse(head) else { return Ok(()) };
    let vs = h.virtual_size();
    let mut sink = Checking::new(vs);
    if vmdk::convert(&h, stream, &mut sink).is_ok() {
        assert_eq!(sink.bytes, vs, "success must cover the whole virtual size");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    let _ = convert(data, &mut stream);
    let _ = ova::is_ova(data);
    let mut stream = data;
    let _ = ova::with_disk(&mut stream, None, |member, _| {
        let mut head = Vec::new();
        member.take(64 << 10).read_to_end(&mut head).map_err(|e| importer::error::untag(e, 0))?;
        let mut chained = std::io::Cursor::new(head.clone()).chain(member);
        convert(&head, &mut chained)
    });
});
