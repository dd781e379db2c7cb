//! `MigrationPolicy` (`migrations.kubevirt.io/v1alpha1`, cluster-scoped; contract §5.5): migration tunables for the
//! VMIs its selectors match, overriding `KubeVirt.spec.configuration.migrations`. The migration controller resolves
//! the policy of a VMI when it hands a migration to the nodes ([`best_match`]) and freezes the result
//! ([`MigrationPolicySpec::apply_to`]) into `status.migrationState.migrationConfiguration`, which the source node
//! agent migrates with.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::MigrationConfiguration;
use super::wire::Extra;

/// Desired state of a MigrationPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "migrations.kubevirt.io",
    version = "v1alpha1",
    kind = "MigrationPolicy",
    plural = "migrationpolicies",
    singular = "migrationpolicy",
    status = "MigrationPolicyStatus",
    category = "all",
    doc = "MigrationPolicy holds migration configurations for the VMIs its selectors match"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MigrationPolicySpec {
    /// Which VMIs it applies to (required by upstream's schema; a policy without selectors matches nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selectors: Option<Selectors>,
    /// Throttle the guest's vCPUs when the copy does not converge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_auto_converge: Option<bool>,
    /// Bandwidth cap per migration (a quantity per second; 0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_per_migration: Option<Quantity>,
    /// Seconds per GiB before the migration is aborted.
    #[serde(rename = "completionTimeoutPerGiB", skip_serializing_if = "Option::is_none")]
    pub completion_timeout_per_gib: Option<i64>,
    /// Switch to post-copy on the completion timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_post_copy: Option<bool>,
    /// Pause the guest instead of aborting on the completion timeout (follows `allowPostCopy` when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_workload_disruption: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.selectors`: label maps every one of whose entries must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selectors {
    /// Labels the VMI's namespace must carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<BTreeMap<String, String>>,
    /// Labels the VMI must carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_machine_instance_selector: Option<BTreeMap<String, String>>,
}

/// Observed state of a MigrationPolicy (upstream writes none).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MigrationPolicyStatus {
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl MigrationPolicySpec {
    /// `cluster` with this policy's tunables laid over it (upstream's `GetMigrationConfByPolicy`:
    /// `allowWorkloadDisruption` follows `allowPostCopy` when only the latter is set).
    pub fn apply_to(&self, cluster: &MigrationConfiguration) -> MigrationConfiguration {
        let mut c = cluster.clone();
        if let Some(v) = self.allow_auto_converge {
            c.allow_auto_converge = Some(v);
        }
        if let Some(v) = &self.bandwidth_per_migration {
            c.bandwidth_per_migration = Some(v.clone());
        }
        if let Some(v) = self.completion_timeout_per_gib {
            c.completion_timeout_per_gib = Some(v);
        }
        if let Some(v) = self.allow_post_copy {
            c.allow_post_copy = Some(v);
        }
        if let Some(v) = self.allow_workload_disruption.or(self.allow_post_copy) {
            c.allow_workload_disruption = Some(v);
        }
        c
    }
}

/// How well a policy matches: labels matched on the VMI and on its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Score {
    vmi: usize,
    namespace: usize,
}

impl Score {
    /// Upstream's order: more matched labels in total; on a tie, more matched on the VMI.
    fn key(self) -> (usize, usize) {
        (self.vmi + self.namespace, self.vmi)
    }
}

/// The number of `selector`'s entries `labels` carries, `None` when one is missing or differs.
fn matched(selector: Option<&BTreeMap<String, String>>, labels: &BTreeMap<String, String>) -> Option<usize> {
    let selector = selector.map(|s| s.iter()).into_iter().flatten();
    let mut n = 0;
    for (k, v) in selector {
        if labels.get(k) != Some(v) {
            return None;
        }
        n += 1;
    }
    Some(n)
}

fn score(policy: &MigrationPolicy, vmi: &BTreeMap<String, String>, ns: &BTreeMap<String, String>) -> Option<Score> {
    let s = policy.spec.selectors.as_ref()?;
    Some(Score {
        vmi: matched(s.virtual_machine_instance_selector.as_ref(), vmi)?,
        namespace: matched(s.namespace_selector.as_ref(), ns)?,
    })
}

/// The policy for a VMI with labels `vmi_labels` in a namespace with labels `namespace_labels` (upstream's
/// `matchPolicy`): among the policies whose every selector entry matches, the one matching the most labels (a tie:
/// the most on the VMI, then the lexicographically first name). Deviation: a VMI without labels is matched only by
/// policies that name no VMI labels (upstream's nil-map shortcut lets every policy match it).
pub fn best_match<'a>(
    policies: impl IntoIterator<Item = &'a MigrationPolicy>,
    vmi_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<&'a MigrationPolicy> {
    let mut best: Option<(Score, &MigrationPolicy)> = None;
    for p in policies {
        let Some(s) = score(p, vmi_labels, namespace_labels) else { continue };
        let better = match &best {
            None => true,
            Some((b, bp)) => s.key() > b.key() || (s.key() == b.key() && p.name_any() < bp.name_any()),
        };
        if better {
            best = Some((s, p));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn policy(name: &str, vmi: &[(&str, &str)], ns: &[(&str, &str)]) -> MigrationPolicy {
        let mut p = MigrationPolicy::new(
            name,
            MigrationPolicySpec {
                selectors: Some(Selectors {
                    namespace_selector: (!ns.is_empty()).then(|| labels(ns)),
                    virtual_machine_instance_selector: (!vmi.is_empty()).then(|| labels(vmi)),
                }),
                ..Default::default()
            },
        );
        p.metadata.name = Some(name.into());
        p
    }

    #[test]
    fn the_most_specific_policy_wins_then_vmi_labels_then_the_name() {
        let vmi = labels(&[("a", "1"), ("b", "2")]);
        let ns = labels(&[("team", "x")]);
        let by_vmi_one = policy("p-vmi-one", &[("a", "1")], &[]);
        let by_ns_one = policy("p-ns-one", &[], &[("team", "x")]);
        let two = policy("p-two", &[("a", "1")], &[("team", "x")]);
        let wrong = policy("p-wrong", &[("a", "1"), ("b", "3"), ("c", "4")], &[]);
        let no_selectors = MigrationPolicy::new("p-none", MigrationPolicySpec::default());
        let all = [by_vmi_one.clone(), by_ns_one.clone(), two.clone(), wrong.clone(), no_selectors.clone()];
        assert_eq!(best_match(&all, &vmi, &ns).map(|p| p.name_any()), Some("p-two".into()));
        // A tie in total: the one matching more VMI labels.
        let vmi_two = policy("z-vmi-two", &[("a", "1"), ("b", "2")], &[]);
        assert_eq!(best_match([&vmi_two, &two], &vmi, &ns).map(|p| p.name_any()), Some("z-vmi-two".into()));
        // A full tie: the first name.
        let twin = policy("a-twin", &[("a", "1")], &[]);
        assert_eq!(best_match([&by_vmi_one, &twin], &vmi, &ns).map(|p| p.name_any()), Some("a-twin".into()));
        assert_eq!(best_match([&by_ns_one, &by_vmi_one], &vmi, &ns).map(|p| p.name_any()), Some("p-vmi-one".into()));
        assert!(best_match([&wrong, &no_selectors], &vmi, &ns).is_none());
        // Empty selectors match everything, with score 0.
        let empty = policy("empty", &[], &[]);
        assert_eq!(best_match([&empty], &labels(&[]), &labels(&[])).map(|p| p.name_any()), Some("empty".into()));
    }

    #[test]
    fn the_policy_overrides_what_it_sets() {
        let cluster = MigrationConfiguration {
            bandwidth_per_migration: Some(Quantity("64Mi".into())),
            completion_timeout_per_gib: Some(150),
            allow_auto_converge: Some(true),
            ..Default::default()
        };
        let spec = MigrationPolicySpec {
            bandwidth_per_migration: Some(Quantity("1Mi".into())),
            allow_post_copy: Some(true),
            ..Default::default()
        };
        let c = spec.apply_to(&cluster);
        assert_eq!(c.bandwidth_per_migration, Some(Quantity("1Mi".into())));
        assert_eq!(c.completion_timeout_per_gib, Some(150));
        assert_eq!(c.allow_auto_converge, Some(true));
        assert_eq!((c.allow_post_copy, c.allow_workload_disruption), (Some(true), Some(true)));
        let explicit = MigrationPolicySpec {
            allow_post_copy: Some(true),
            allow_workload_disruption: Some(false),
            ..Default::default()
        };
        assert_eq!(explicit.apply_to(&cluster).allow_workload_disruption, Some(false));
    }
}
