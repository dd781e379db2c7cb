//! Shared state of the reconcilers: the API client, read caches (reflector stores) of everything the controllers
//! read, settings from the environment, the upload PKI, events, metrics and the error policies — and the reads
//! both reconcilers make of the cluster's storage configuration.

use std::collections::BTreeMap;
use std::sync::Arc;

use contracts::cdi::sizing::parse_config_overhead;
use contracts::quantity::parse_bytes;
use controller_runtime::events::Events;
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::ErrorPolicy;
use crds::cdi::config::{CDI_CONFIG_NAME, CDIConfig, FilesystemOverhead, StorageProfile};
use crds::cdi::consts::{self, ann};
use crds::cdi::operator::{CDI, NodePlacement};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceRequirements};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::certs::UploadPki;
use crate::datavolume::claim::StorageFacts;
use crate::transfer::pods::WorkerConfig;

/// Settings from the controller's environment (`IMPORTER_IMAGE`, …; `specs/cdi.md` §0).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespace of the control plane (`CDI_NAMESPACE`, default `cdi`).
    pub namespace: String,
    /// `IMPORTER_IMAGE`.
    pub importer_image: String,
    /// `CLONER_IMAGE` (defaults to the importer image, which contains the clone-source server).
    pub cloner_image: String,
    /// `UPLOADSERVER_IMAGE`.
    pub uploadserver_image: String,
    /// `PULL_POLICY` (default `IfNotPresent`).
    pub pull_policy: String,
}

/// Read caches, kept current by watches.
#[derive(Clone)]
pub struct Stores {
    /// Every PVC.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// CDI's worker pods (label `app=containerized-data-importer`).
    pub pods: Store<Pod>,
    /// StorageClasses.
    pub classes: Store<StorageClass>,
    /// StorageProfiles.
    pub profiles: Store<StorageProfile>,
    /// CDIConfigs (only `config` is used).
    pub configs: Store<CDIConfig>,
    /// The CDI installation (its `spec.workloads`).
    pub cdis: Store<CDI>,
}

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Environment settings.
    pub settings: Settings,
    /// Read caches.
    pub stores: Stores,
    /// Events on DataVolumes.
    pub events: Events,
    /// HTTPS client for progress scraping.
    pub scraper: reqwest::Client,
    /// Upload PKI.
    pub pki: UploadPki,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    /// Retry state of the DataVolume reconciler.
    pub dv_policy: ErrorPolicy,
    /// Retry state of the transfer reconciler.
    pub transfer_policy: ErrorPolicy,
}

/// Default worker resources (`CDIConfig` status defaults).
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        limits: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("750m".into())),
            ("memory".to_owned(), Quantity("600M".into())),
        ])),
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("100m".into())),
            ("memory".to_owned(), Quantity("60M".into())),
        ])),
        ..Default::default()
    }
}

impl Context {
    /// The `config` CDIConfig, if present.
    pub fn cdi_config(&self) -> Option<Arc<CDIConfig>> {
        self.stores.configs.get(&ObjectRef::new(CDI_CONFIG_NAME))
    }

    /// Filesystem overhead of `class`: per-class setting, else global, else 0.06.
    pub fn overhead(&self, class: Option<&str>) -> f64 {
        let fo: Option<FilesystemOverhead> = self.cdi_config().and_then(|c| c.spec.filesystem_overhead.clone());
        let per_class =
            class.and_then(|c| fo.as_ref()?.storage_class.as_ref()?.get(c).and_then(|v| parse_config_overhead(v)));
        let global = fo.as_ref().and_then(|f| f.global.as_deref()).and_then(parse_config_overhead);
        per_class.or(global).unwrap_or(0.06)
    }

    /// The worker settings from the environment and the effective CDIConfig.
    pub fn worker_config(&self) -> WorkerConfig {
        let spec = self.cdi_config().map(|c| c.spec.clone()).unwrap_or_default();
        WorkerConfig {
            importer_image: self.settings.importer_image.clone(),
            cloner_image: self.settings.cloner_image.clone(),
            uploadserver_image: self.settings.uploadserver_image.clone(),
            pull_policy: self.settings.pull_policy.clone(),
            resources: spec.pod_resource_requirements.clone().unwrap_or_else(default_resources),
            verbosity: spec.log_verbosity.unwrap_or(1),
            insecure_registries: spec.insecure_registries.clone().unwrap_or_default(),
            import_proxy: spec.import_proxy.clone(),
            image_pull_secrets: spec.image_pull_secrets.clone().unwrap_or_default(),
            preallocation: spec.preallocation.unwrap_or(false),
            scratch_class: spec.scratch_space_storage_class.clone(),
            placement: self.workload_placement(),
        }
    }

    /// The CDI installation's `spec.workloads` (the first CDI object not being deleted; there is one).
    pub fn workload_placement(&self) -> Option<NodePlacement> {
        let cdis = self.stores.cdis.state();
        cdis.iter().find(|c| c.metadata.deletion_timestamp.is_none()).and_then(|c| c.spec.workloads.clone())
    }

    /// The class a claim without `storageClassName` gets ([`default_class`]).
    pub fn default_class(&self) -> Option<String> {
        default_class(&self.stores.classes.state())
    }

    /// Whether `class` binds WaitForFirstConsumer.
    pub fn is_wffc(&self, class: Option<&str>) -> bool {
        class
            .and_then(|c| self.stores.classes.get(&ObjectRef::new(c)))
            .is_some_and(|sc| sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    /// Storage facts for a DataVolume whose explicit class is `explicit` (and clone source, if any).
    pub fn storage_facts(&self, explicit: Option<&str>, clone_source: Option<&PersistentVolumeClaim>) -> StorageFacts {
        let class = explicit.map(str::to_owned).or_else(|| self.default_class());
        let profile = class.as_deref().and_then(|c| self.stores.profiles.get(&ObjectRef::new(c)));
        let first_set = profile
            .as_ref()
            .and_then(|p| p.spec.claim_property_sets.clone().or_else(|| p.status.as_ref()?.claim_property_sets.clone()))
            .and_then(|sets| sets.into_iter().next());
        StorageFacts {
            overhead: self.overhead(class.as_deref()),
            minimum_size: profile
                .as_ref()
                .and_then(|p| p.spec.minimum_supported_pvc_size.as_deref())
                .and_then(|q| parse_bytes(q).ok()),
            profile_access_modes: first_set.as_ref().and_then(|s| s.access_modes.clone()),
            profile_volume_mode: first_set.and_then(|s| s.volume_mode),
            clone_source_size: clone_source.and_then(|p| {
                p.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage").map(|q| q.0.clone())
            }),
            class,
        }
    }
}

/// Whether `class` carries annotation `key` with value `true`.
pub fn marked(class: &StorageClass, key: &str) -> bool {
    class.annotations().get(key).is_some_and(|v| v == "true")
}

/// The class a claim without `storageClassName` gets among `classes`: the default virt class, then the default
/// class.
pub fn default_class(classes: &[std::sync::Arc<StorageClass>]) -> Option<String> {
    let first = |key: &str| classes.iter().find(|c| marked(c, key)).map(|c| c.name_any());
    first(ann::DEFAULT_VIRT_CLASS).or_else(|| first(ann::DEFAULT_CLASS))
}

/// Label selector of CDI's worker pods.
pub fn worker_pod_selector() -> String {
    format!("{}={}", consts::label::APP, consts::label::APP_VALUE)
}
