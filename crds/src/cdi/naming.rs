//! Kubernetes object-name helpers shared by the controllers and the upload proxy.

use sha2::{Digest, Sha256};

/// Longest name a label value, Service or pod hostname may have.
pub const MAX_NAME: usize = 63;

/// `base` + `suffix`, shortened like CDI's resource-name helper when longer than [`MAX_NAME`]: the joined name is
/// cut and the first 8 hex digits of its SHA-256 are appended after a `-`, so distinct long names stay distinct
/// and the result is always a valid DNS label (no trailing `-` or `.` before the hash).
pub fn resource_name(base: &str, suffix: &str) -> String {
    let full = if suffix.is_empty() { base.to_owned() } else { format!("{base}-{suffix}") };
    if full.len() <= MAX_NAME {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = MAX_NAME - hash.len() - 1;
    let mut cut = full.as_bytes()[..keep].to_vec();
    while cut.last().is_some_and(|c| *c == b'-' || *c == b'.') {
        cut.pop();
    }
    format!("{}-{hash}", String::from_utf8_lossy(&cut))
}

/// Name of the importer pod for PVC `pvc` (`importer-<pvc>`).
pub fn importer_pod(pvc: &str) -> String {
    resource_name("importer", pvc)
}

/// Name of the upload-server pod and Service for PVC `pvc` (`cdi-upload-<pvc>`).
pub fn upload_server(pvc: &str) -> String {
    resource_name("cdi-upload", pvc)
}

/// Name of the scratch PVC for PVC `pvc` (`<pvc>-scratch`).
pub fn scratch_pvc(pvc: &str) -> String {
    resource_name(pvc, "scratch")
}

/// Name of the clone-source pod for a target PVC with UID `target_uid` (`<uid>-source-pod`).
pub fn clone_source_pod(target_uid: &str) -> String {
    resource_name(target_uid, "source-pod")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept() {
        assert_eq!(importer_pod("disk"), "importer-disk");
        assert_eq!(scratch_pvc("disk"), "disk-scratch");
        assert_eq!(upload_server("d"), "cdi-upload-d");
    }

    #[test]
    fn long_names_are_cut_and_hashed_distinctly() {
        let a = importer_pod(&"a".repeat(70));
        let b = importer_pod(&format!("{}b", "a".repeat(69)));
        assert_eq!(a.len(), MAX_NAME);
        assert_ne!(a, b);
        assert!(a.starts_with("importer-aaaa"));
        let dashed = resource_name(&format!("{}-{}", "x".repeat(53), "y".repeat(20)), "");
        assert!(!dashed.contains("--"), "{dashed}");
        assert!(dashed.len() <= MAX_NAME);
    }
}
