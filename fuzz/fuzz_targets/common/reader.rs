//! The check every positional-reader target makes (vhd, vhdx, vmdk_sparse): open the image, and when it opens with
//! a virtual size worth converting (at most 256 MiB: bigger images only cost time, the work per guest byte is the
//! same), convert it into a [`Checking`] sink, which asserts that only `[0, virtual size)` is written and no guest
//! byte twice; a successful conversion must have covered every guest byte.

use importer::format::positional::Reader;
use importer::source::RandomAccess;

use crate::checking::Checking;

/// Opens `image` with `open` and checks the conversion as the module says.
pub fn check(image: &dyn RandomAccess, open: fn(&dyn RandomAccess) -> Option<Box<dyn Reader>>) {
    let Some(r) = open(image) else { return };
    let vs = r.virtual_size();
    if vs > 256 << 20 {
        return;
    }
    let mut sink = Checking::new(vs);
    if r.write_all(image, &mut sink).is_ok() {
        assert_eq!(sink.bytes, vs, "success must cover the whole virtual size");
    }
}
