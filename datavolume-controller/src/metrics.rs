//! Upstream cdi-controller's cluster metrics, computed from the controller's caches at every scrape (pure,
//! table-tested), under upstream's names and help texts:
//!
//! | metric | labels | value |
//! | --- | --- | --- |
//! | `kubevirt_cdi_storageprofile_info` | `storageclass`, `provisioner`, `complete`, `default`, `virtdefault`, `rwx`, `smartclone`, `degraded` | 1 per StorageProfile |
//! | `kubevirt_cdi_datavolume_pending` | — | DataVolumes `Pending` whose claim names no class while no class is default |
//! | `kubevirt_cdi_import_pods_high_restart`, `_upload_pods_high_restart`, `_clone_pods_high_restart` | — | worker pods of that kind whose container restarted more than [`HIGH_RESTARTS`] times |
//!
//! A profile is `complete` when it recommends at least one claim property set and each has access modes and a
//! volume mode; `rwx` when one offers `ReadWriteMany`; `smartclone` when its clone strategy is `csi-clone` or
//! `snapshot`; `degraded` unless it is both `rwx` and `smartclone` (what upstream's alerts read as "not optimal
//! for virtualization").

use std::sync::Arc;

use controller_runtime::metrics::{Computed, Registry};
use crds::cdi::config::StorageProfile;
use crds::cdi::consts::{ann, label};
use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::context::{default_class, marked};

/// Restarts above which a worker pod counts as restarting unusually often (upstream's threshold).
pub const HIGH_RESTARTS: i32 = 3;

/// `kubevirt_cdi_storageprofile_info` for `profiles`, the class's annotations read from `classes`.
pub fn storageprofile_info(profiles: &[Arc<StorageProfile>], classes: &[Arc<StorageClass>]) -> Computed {
    let mut g = Computed::gauge(
        "kubevirt_cdi_storageprofile_info",
        "`StorageProfiles` info labels: `storageclass`, `provisioner`, `complete` indicates if all storage profiles \
         recommended PVC settings are complete, `default` indicates if it's the Kubernetes default storage class, \
         `virtdefault` indicates if it's the default virtualization storage class, `rwx` indicates if the storage \
         class supports `ReadWriteMany`, `smartclone` indicates if it supports snapshot or CSI based clone, \
         `degraded` indicates it is not optimal for virtualization",
    );
    for p in profiles {
        let name = p.name_any();
        let status = p.status.clone().unwrap_or_default();
        let sets = status.claim_property_sets.unwrap_or_default();
        let class = classes.iter().find(|c| c.name_any() == name);
        let complete = !sets.is_empty()
            && sets.iter().all(|s| s.access_modes.as_ref().is_some_and(|m| !m.is_empty()) && s.volume_mode.is_some());
        let rwx = sets.iter().any(|s| s.access_modes.iter().flatten().any(|m| m == "ReadWriteMany"));
        let smartclone = matches!(status.clone_strategy.as_deref(), Some("csi-clone" | "snapshot"));
        let flag = |b: bool| String::from(if b { "true" } else { "false" });
        let labels = vec![
            ("storageclass".into(), status.storage_class.unwrap_or(name)),
            (
                "provisioner".into(),
                status.provisioner.or_else(|| class.map(|c| c.provisioner.clone())).unwrap_or_default(),
            ),
            ("complete".into(), flag(complete)),
            ("default".into(), flag(class.is_some_and(|c| marked(c, ann::DEFAULT_CLASS)))),
            ("virtdefault".into(), flag(class.is_some_and(|c| marked(c, ann::DEFAULT_VIRT_CLASS)))),
            ("rwx".into(), flag(rwx)),
            ("smartclone".into(), flag(smartclone)),
            ("degraded".into(), flag(!(rwx && smartclone))),
        ];
        g.add(labels, 1.0);
    }
    g
}

/// `kubevirt_cdi_datavolume_pending`: DataVolumes `Pending` that wait for a default class (none is set).
pub fn datavolume_pending(dvs: &[Arc<DataVolume>], classes: &[Arc<StorageClass>]) -> Computed {
    let mut g = Computed::gauge(
        "kubevirt_cdi_datavolume_pending",
        "Number of DataVolumes pending for default storage class to be configured",
    );
    let waiting = default_class(classes).is_none();
    let pending = dvs
        .iter()
        .filter(|dv| waiting && dv.storage_class_name().is_none())
        .filter(|dv| dv.status.as_ref().and_then(|s| s.phase) == Some(DataVolumePhase::Pending))
        .count();
    g.add(Vec::new(), pending as f64);
    g
}

/// The three `kubevirt_cdi_*_pods_high_restart` gauges over CDI's worker `pods`.
pub fn pods_high_restart(pods: &[Arc<Pod>]) -> Vec<Computed> {
    let restarting = |kind: &str| {
        pods.iter()
            .filter(|p| p.labels().get(label::CDI).is_some_and(|k| k == kind))
            .filter(|p| {
                let statuses = p.status.as_ref().and_then(|s| s.container_statuses.as_ref());
                statuses.is_some_and(|cs| cs.iter().any(|c| c.restart_count > HIGH_RESTARTS))
            })
            .count() as f64
    };
    let gauge = |name, help, kind| {
        let mut g = Computed::gauge(name, help);
        g.add(Vec::new(), restarting(kind));
        g
    };
    vec![
        gauge(
            "kubevirt_cdi_clone_pods_high_restart",
            "The number of CDI clone pods with high restart count",
            label::worker::CLONE_SOURCE,
        ),
        gauge(
            "kubevirt_cdi_import_pods_high_restart",
            "The number of CDI import pods with high restart count",
            label::worker::IMPORTER,
        ),
        gauge(
            "kubevirt_cdi_upload_pods_high_restart",
            "The number of CDI upload server pods with high restart count",
            label::worker::UPLOAD_SERVER,
        ),
    ]
}

/// A registry of every metric above over the caches.
pub fn registry(
    profiles: Store<StorageProfile>,
    classes: Store<StorageClass>,
    dvs: Store<DataVolume>,
    pods: Store<Pod>,
) -> Registry {
    Registry::computed(move || {
        let classes = classes.state();
        let mut all =
            vec![storageprofile_info(&profiles.state(), &classes), datavolume_pending(&dvs.state(), &classes)];
        all.extend(pods_high_restart(&pods.state()));
        all
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}")))
    }

    fn class(name: &str, annotations: serde_json::Value) -> Arc<StorageClass> {
        parse(json!({"metadata": {"name": name, "annotations": annotations}, "provisioner": format!("{name}.csi")}))
    }

    fn profile(name: &str, sets: serde_json::Value, strategy: &str) -> Arc<StorageProfile> {
        parse(json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile", "metadata": {"name": name},
            "spec": {}, "status": {"storageClass": name, "provisioner": format!("{name}.csi"),
            "claimPropertySets": sets, "cloneStrategy": strategy}}))
    }

    fn dv(name: &str, class: Option<&str>, phase: &str) -> Arc<DataVolume> {
        let mut storage = json!({"resources": {"requests": {"storage": "1Gi"}}});
        if let Some(c) = class {
            storage["storageClassName"] = json!(c);
        }
        parse(json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"source": {"blank": {}}, "storage": storage}, "status": {"phase": phase}}))
    }

    fn pod(kind: &str, restarts: i32) -> Arc<Pod> {
        parse(json!({"metadata": {"name": format!("{kind}-{restarts}"), "labels": {"cdi.kubevirt.io": kind}},
            "status": {"containerStatuses": [{"name": kind, "image": "i", "imageID": "", "ready": true,
                "restartCount": restarts}]}}))
    }

    #[test]
    fn storage_profiles_are_described_by_their_labels() {
        let classes = [
            class("local", json!({"storageclass.kubernetes.io/is-default-class": "true"})),
            class("shared", json!({"storageclass.kubevirt.io/is-default-virt-class": "true"})),
        ];
        let rwo = json!([{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}]);
        let rwx = json!([{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}]);
        let profiles = [
            profile("local", rwo, "copy"),
            profile("shared", rwx, "csi-clone"),
            profile("bare", json!([]), "snapshot"),
        ];
        let g = storageprofile_info(&profiles, &classes);
        let labels = |sc: &str, complete, default, virt, rwx, smart, degraded| {
            let p = format!("{sc}.csi");
            [
                ("storageclass", sc.to_owned()),
                ("provisioner", p),
                ("complete", complete),
                ("default", default),
                ("virtdefault", virt),
                ("rwx", rwx),
                ("smartclone", smart),
                ("degraded", degraded),
            ]
        };
        let t = || String::from("true");
        let f = || String::from("false");
        for l in [
            labels("local", t(), t(), f(), f(), f(), t()),
            labels("shared", t(), f(), t(), t(), t(), f()),
            labels("bare", f(), f(), f(), f(), t(), t()),
        ] {
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(g.value(&l), Some(1.0), "{l:?}");
        }
    }

    #[test]
    fn datavolumes_pending_count_only_while_no_class_is_default() {
        let dvs = [dv("a", None, "Pending"), dv("b", Some("local"), "Pending"), dv("c", None, "Succeeded")];
        let none = [class("local", json!({}))];
        assert_eq!(datavolume_pending(&dvs, &none).value(&[]), Some(1.0));
        let default = [class("local", json!({"storageclass.kubernetes.io/is-default-class": "true"}))];
        assert_eq!(datavolume_pending(&dvs, &default).value(&[]), Some(0.0));
    }

    #[test]
    fn worker_pods_restarting_more_than_three_times_are_counted_by_kind() {
        let pods = [pod("importer", 4), pod("importer", 3), pod("cdi-upload-server", 9), pod("cdi-clone-source", 0)];
        let gs = pods_high_restart(&pods);
        let v = |name: &str| gs.iter().find(|g| g.name == name).and_then(|g| g.value(&[]));
        assert_eq!(v("kubevirt_cdi_import_pods_high_restart"), Some(1.0));
        assert_eq!(v("kubevirt_cdi_upload_pods_high_restart"), Some(1.0));
        assert_eq!(v("kubevirt_cdi_clone_pods_high_restart"), Some(0.0));
    }
}
