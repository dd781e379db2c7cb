//! The node agents' migration decisions, pure (contract §5.4): what the source and the target agent do next for a
//! VMI's `status.migrationState`, which disks a migration copies, and when a running migration is given up.

use std::collections::BTreeMap;
use std::time::Duration;

use contracts::kubevirt::launcher::{EPHEMERAL_DISKS_DIR, MigrationChannel};
use crds::kubevirt::vmi::VirtualMachineInstanceMigrationState as State;

/// The source agent's next step for a VMI on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceStep {
    /// Nothing to do.
    Idle,
    /// Start migrating to the target agent at `address` (its proxy ports by channel).
    Start {
        /// The target node agent's address.
        address: String,
        /// Port of each channel's proxy on the target.
        ports: BTreeMap<MigrationChannel, u16>,
    },
    /// Cancel the running migration (its VMIM was deleted).
    Abort,
    /// Record that the migration was cancelled before it started.
    AbortedBeforeStart,
    /// The migration started but this agent holds no job for it (it restarted): it cannot be going on (its proxies
    /// died with the old process), record the failure.
    Orphaned,
}

/// The proxy ports a target published: `targetDirectMigrationNodePorts` (node port → [`MigrationChannel::upstream_port`]).
pub fn published_ports(state: &State) -> BTreeMap<MigrationChannel, u16> {
    state
        .target_direct_migration_node_ports
        .iter()
        .flatten()
        .filter_map(|(port, upstream)| {
            Some((MigrationChannel::of_upstream_port(*upstream)?, port.parse::<u16>().ok().filter(|p| *p != 0)?))
        })
        .collect()
}

/// Whether the migration of `state` is over (completed or failed).
pub fn is_over(state: &State) -> bool {
    state.completed == Some(true) || state.failed == Some(true)
}

/// The source agent's step: `pod` is the VMI's launcher pod on this node (by name), `running` whether this agent
/// holds a job for the migration.
pub fn source_step(state: Option<&State>, pod: &str, running: bool) -> SourceStep {
    let Some(s) = state.filter(|s| s.migration_uid.is_some() && s.source_pod.as_deref() == Some(pod)) else {
        return if running { SourceStep::Abort } else { SourceStep::Idle };
    };
    if is_over(s) {
        return SourceStep::Idle;
    }
    if s.abort_requested == Some(true) {
        return if running {
            SourceStep::Abort
        } else if s.start_timestamp.is_none() {
            SourceStep::AbortedBeforeStart
        } else {
            SourceStep::Orphaned
        };
    }
    if running {
        return SourceStep::Idle;
    }
    if s.start_timestamp.is_some() {
        return SourceStep::Orphaned;
    }
    let ports = published_ports(s);
    match &s.target_node_address {
        Some(address) if ports.len() == MigrationChannel::ALL.len() => {
            SourceStep::Start { address: address.clone(), ports }
        }
        _ => SourceStep::Idle,
    }
}

/// The target agent's next step for a VMI labelled with its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetStep {
    /// Nothing to do (yet): the target pod is not ready, or the migration is not this node's.
    Wait,
    /// Open the proxies (when not open) and publish their address and ports.
    Publish,
    /// The migration completed and the domain runs here: take the VMI over (node name, labels, active pods).
    TakeOver,
    /// The migration is over without this node (failed, aborted): close the proxies.
    Release,
}

/// The target agent's step: `node` is this node, `launcher_ready` whether the target pod's launcher is prepared,
/// `published` whether `state` already shows this agent's current proxies, `domain_running` whether the target's
/// libvirt runs the domain.
pub fn target_step(
    state: Option<&State>,
    node: &str,
    launcher_ready: bool,
    published: bool,
    domain_running: bool,
) -> TargetStep {
    let Some(s) = state.filter(|s| s.migration_uid.is_some() && s.target_node.as_deref() == Some(node)) else {
        return TargetStep::Release;
    };
    if s.failed == Some(true) {
        return TargetStep::Release;
    }
    if s.completed == Some(true) {
        return if domain_running { TargetStep::TakeOver } else { TargetStep::Wait };
    }
    if s.abort_requested == Some(true) || !launcher_ready || published {
        return TargetStep::Wait;
    }
    TargetStep::Publish
}

/// Target names of the domain's disks a migration must copy (block migration): the writable disks whose image is
/// in the pod's ephemeral-disk directory (containerDisk overlays, emptyDisks, cloud-init disks). Claims are shared
/// (ReadWriteMany) and read-only disks are not written; neither is copied. Unparseable XML: none.
pub fn disks_to_copy(domain_xml: &str) -> Vec<String> {
    let Ok(doc) = roxmltree::Document::parse(domain_xml) else { return Vec::new() };
    let local = format!("{EPHEMERAL_DISKS_DIR}/");
    doc.descendants()
        .filter(|n| n.has_tag_name("disk"))
        .filter(|d| !d.children().any(|c| c.has_tag_name("readonly") || c.has_tag_name("shareable")))
        .filter(|d| {
            d.children()
                .find(|c| c.has_tag_name("source"))
                .and_then(|s| s.attribute("file").or_else(|| s.attribute("dev")))
                .is_some_and(|p| p.starts_with(&local))
        })
        .filter_map(|d| d.children().find(|c| c.has_tag_name("target"))?.attribute("dev").map(str::to_owned))
        .collect()
}

/// Whether the disks a migration leaves in place (those not in `copied`, writable) are all the pod's claims
/// (`vmi-disks/…` files, hotplugged claims' `hotplug-disks/…` images, or block devices) opened without the host's
/// page cache (`cache` none or directsync).
/// Their ReadWriteMany access mode is what made the VMI migratable (§3): the storage is shared by contract, which
/// libvirt cannot see for a filesystem it does not know as shared (its local-filesystem heuristic refuses such a
/// migration as unsafe); with no host cache on either side the hand-over is coherent, so the migration may skip that
/// heuristic (`VIR_MIGRATE_UNSAFE`). Any other disk left in place keeps libvirt's check.
pub fn shared_claims_coherent(domain_xml: &str, copied: &[String]) -> bool {
    let Ok(doc) = roxmltree::Document::parse(domain_xml) else { return false };
    let claims = format!("{}/vmi-disks/", contracts::kubevirt::launcher::PRIVATE_DIR);
    let hotplugged = format!("{}/", contracts::kubevirt::launcher::HOTPLUG_DISKS_DIR);
    let mut any = false;
    for d in doc.descendants().filter(|n| n.has_tag_name("disk")) {
        if d.children().any(|c| c.has_tag_name("readonly")) {
            continue;
        }
        let target = d.children().find(|c| c.has_tag_name("target")).and_then(|t| t.attribute("dev"));
        if target.is_some_and(|t| copied.iter().any(|c| c == t)) {
            continue;
        }
        let source = d.children().find(|c| c.has_tag_name("source"));
        let claim = match (d.attribute("type"), source) {
            (Some("file"), Some(s)) => {
                s.attribute("file").is_some_and(|f| f.starts_with(&claims) || f.starts_with(&hotplugged))
            }
            (Some("block"), Some(s)) => s.attribute("dev").is_some(),
            (_, None) => continue,
            _ => false,
        };
        let cache = d.children().find(|c| c.has_tag_name("driver")).and_then(|c| c.attribute("cache"));
        if !claim || !matches!(cache, Some("none" | "directsync")) {
            return false;
        }
        any = true;
    }
    any
}

/// When a running migration is given up (§5.5): after `completion_timeout_per_gib` per GiB of guest memory and
/// copied disk (at least one GiB's worth), or when no data moved for `progress_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Allowed time per GiB (upstream's default 150 s).
    pub completion_timeout_per_gib: Duration,
    /// Allowed time without progress (upstream's default 150 s).
    pub progress_timeout: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { completion_timeout_per_gib: Duration::from_secs(150), progress_timeout: Duration::from_secs(150) }
    }
}

impl Timeouts {
    /// The completion deadline for `bytes` of memory and copied disks.
    pub fn completion(&self, bytes: u64) -> Duration {
        const GIB: u64 = 1 << 30;
        let gib = bytes.div_ceil(GIB).max(1);
        self.completion_timeout_per_gib.saturating_mul(u32::try_from(gib).unwrap_or(u32::MAX))
    }

    /// Why the migration is given up after `elapsed` in total and `stalled` without progress, if it is.
    pub fn exceeded(&self, bytes: u64, elapsed: Duration, stalled: Duration) -> Option<String> {
        let completion = self.completion(bytes);
        if elapsed > completion {
            return Some(format!(
                "Live migration is not completed after {} seconds and has been aborted",
                completion.as_secs()
            ));
        }
        if stalled > self.progress_timeout {
            return Some(format!(
                "Live migration stuck for {} seconds and has been aborted",
                self.progress_timeout.as_secs()
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn state(f: impl FnOnce(&mut State)) -> State {
        let mut s = State {
            migration_uid: Some("m-1".into()),
            source_pod: Some("src".into()),
            source_node: Some("n1".into()),
            target_node: Some("n2".into()),
            target_pod: Some("tgt".into()),
            ..Default::default()
        };
        f(&mut s);
        s
    }

    fn published(s: &mut State) {
        s.target_node_address = Some("10.244.1.7".into());
        s.target_direct_migration_node_ports =
            Some(BTreeMap::from([("4001".into(), 0), ("4002".into(), 49152), ("4003".into(), 49153)]));
    }

    #[test]
    fn the_source_starts_once_the_target_published_every_port() {
        assert_eq!(source_step(Some(&state(|_| {})), "src", false), SourceStep::Idle);
        let ready = state(published);
        let SourceStep::Start { address, ports } = source_step(Some(&ready), "src", false) else {
            panic!("{:?}", source_step(Some(&ready), "src", false))
        };
        assert_eq!(address, "10.244.1.7");
        assert_eq!(ports.get(&MigrationChannel::Block), Some(&4003));
        // Not this pod's migration, or already running.
        assert_eq!(source_step(Some(&ready), "other", false), SourceStep::Idle);
        assert_eq!(source_step(Some(&ready), "src", true), SourceStep::Idle);
        // A port missing: wait.
        let partial = state(|s| {
            published(s);
            s.target_direct_migration_node_ports = Some(BTreeMap::from([("4001".into(), 0)]));
        });
        assert_eq!(source_step(Some(&partial), "src", false), SourceStep::Idle);
    }

    #[test]
    fn aborts_restarts_and_ends() {
        let t = Time(Timestamp::UNIX_EPOCH);
        let abort = state(|s| s.abort_requested = Some(true));
        assert_eq!(source_step(Some(&abort), "src", true), SourceStep::Abort);
        assert_eq!(source_step(Some(&abort), "src", false), SourceStep::AbortedBeforeStart);
        let started = state(|s| {
            published(s);
            s.start_timestamp = Some(t.clone());
        });
        assert_eq!(source_step(Some(&started), "src", false), SourceStep::Orphaned);
        let done = state(|s| {
            s.start_timestamp = Some(t.clone());
            s.completed = Some(true);
        });
        assert_eq!(source_step(Some(&done), "src", false), SourceStep::Idle);
        // The state went away under a running job (the VMI was re-created, …): stop it.
        assert_eq!(source_step(None, "src", true), SourceStep::Abort);
        assert_eq!(source_step(None, "src", false), SourceStep::Idle);
    }

    #[test]
    fn the_target_publishes_then_takes_over() {
        let s = state(|_| {});
        assert_eq!(target_step(Some(&s), "n2", false, false, false), TargetStep::Wait);
        assert_eq!(target_step(Some(&s), "n2", true, false, false), TargetStep::Publish);
        assert_eq!(target_step(Some(&s), "n2", true, true, false), TargetStep::Wait);
        assert_eq!(target_step(Some(&s), "n1", true, false, false), TargetStep::Release);
        let done = state(|s| s.completed = Some(true));
        assert_eq!(target_step(Some(&done), "n2", true, true, false), TargetStep::Wait);
        assert_eq!(target_step(Some(&done), "n2", true, true, true), TargetStep::TakeOver);
        let failed = state(|s| s.failed = Some(true));
        assert_eq!(target_step(Some(&failed), "n2", true, true, true), TargetStep::Release);
        assert_eq!(target_step(None, "n2", true, true, true), TargetStep::Release);
    }

    #[test]
    fn only_writable_ephemeral_disks_are_copied() {
        let xml = format!(
            "<domain><devices>\
             <disk type='file' device='disk'><source file='{e}/disk-data/root/disk.qcow2'/><target dev='vda'/></disk>\
             <disk type='file' device='disk'><source file='/var/run/kubevirt-private/vmi-disks/pvc/disk.img'/><target dev='vdb'/></disk>\
             <disk type='block' device='disk'><source dev='/dev/blk'/><target dev='vdc'/></disk>\
             <disk type='file' device='cdrom'><source file='{e}/cloud-init/ci/noCloud.iso'/><target dev='sda'/><readonly/></disk>\
             <disk type='file' device='disk'><source file='{e}/empty-disks/scratch.qcow2'/><target dev='vdd'/></disk>\
             </devices></domain>",
            e = EPHEMERAL_DISKS_DIR
        );
        assert_eq!(disks_to_copy(&xml), ["vda", "vdd"]);
        assert!(disks_to_copy("not xml").is_empty());
    }

    #[test]
    fn shared_claims_without_host_cache_are_trusted() {
        let claim = |cache: &str| {
            format!(
                "<disk type='file' device='disk'><driver name='qemu' cache='{cache}'/>\
                 <source file='/var/run/kubevirt-private/vmi-disks/data/disk.img'/><target dev='vdb'/></disk>"
            )
        };
        let overlay = format!(
            "<disk type='file' device='disk'><driver cache='none'/><source file='{EPHEMERAL_DISKS_DIR}/disk-data/root/disk.qcow2'/><target dev='vda'/></disk>"
        );
        let dom = |disks: &str| format!("<domain><devices>{disks}</devices></domain>");
        let copied = vec!["vda".to_owned()];
        assert!(shared_claims_coherent(&dom(&(overlay.clone() + &claim("none"))), &copied));
        assert!(!shared_claims_coherent(&dom(&(overlay.clone() + &claim("writethrough"))), &copied), "host cache");
        assert!(!shared_claims_coherent(&dom(&(overlay.clone() + &claim("none"))), &[]), "a local disk left in place");
        assert!(!shared_claims_coherent(&dom(&overlay), &copied), "no claim: libvirt's own check");
        let block = "<disk type='block' device='disk'><driver cache='none'/><source dev='/dev/data'/><target dev='vdc'/></disk>";
        assert!(shared_claims_coherent(&dom(block), &[]));
        let hotplugged = "<disk type='file' device='disk'><driver cache='none'/>\
            <source file='/var/run/kubevirt/hotplug-disks/solo.img'/><target dev='sdb'/></disk>";
        assert!(shared_claims_coherent(&dom(&(overlay.clone() + hotplugged)), &copied), "a hotplugged claim");
    }

    #[test]
    fn timeouts_scale_with_the_guest() {
        let t = Timeouts::default();
        assert_eq!(t.completion(64 << 20), Duration::from_secs(150));
        assert_eq!(t.completion(3 << 30), Duration::from_secs(450));
        assert_eq!(t.exceeded(64 << 20, Duration::from_secs(10), Duration::from_secs(1)), None);
        assert!(
            t.exceeded(64 << 20, Duration::from_secs(151), Duration::ZERO).is_some_and(|m| m.contains("150 seconds"))
        );
        assert!(
            t.exceeded(64 << 20, Duration::from_secs(20), Duration::from_secs(151))
                .is_some_and(|m| m.contains("stuck"))
        );
    }
}
