//! Where the contract's paths are on this machine: every path comes from `contracts::kubevirt::launcher` and is
//! placed under one root, `/` in the pod, a temporary directory in tests.

use std::path::{Path, PathBuf};

/// The root the contract's absolute paths are resolved under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Default for Layout {
    /// The pod's layout: the contract's paths as they are.
    fn default() -> Layout {
        Layout { root: PathBuf::from("/") }
    }
}

impl Layout {
    /// Every contract path under `root` (tests).
    pub fn under(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the contract path `path` (absolute, as `launcher::*` spells it) is.
    pub fn at(&self, path: impl AsRef<str>) -> PathBuf {
        self.root.join(path.as_ref().trim_start_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use contracts::kubevirt::launcher;

    use super::*;

    #[test]
    fn contract_paths_move_under_the_root() {
        let ready = launcher::SocketDir::in_pod().ready();
        assert_eq!(Layout::default().at(&ready), PathBuf::from("/var/run/kubevirt/sockets/ready"));
        assert_eq!(
            Layout::under("/tmp/x").at(launcher::empty_disk("d")),
            PathBuf::from("/tmp/x/var/run/kubevirt-ephemeral-disks/empty-disks/d.qcow2")
        );
    }
}
