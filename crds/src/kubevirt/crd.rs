//! The CRDs of `kubevirt.io`. None yet: the VM types land with the VM half, and their CRDs are added to
//! [`files`], which `crdgen` and the drift test already render.

use crate::crd::{Error, GeneratedFile};

/// The generated files of this group (none yet).
pub fn files() -> Result<Vec<GeneratedFile>, Error> {
    Ok(Vec::new())
}
