//! DataVolume → PVC, as a pure function (`specs/cdi.md` §1.2, §1.3, §1.6).
//!
//! The PVC carries everything the transfer reconciler needs as CDI's annotations — the source as a
//! [`TransferRequest`] — so the PVC alone drives the import/upload/clone (like upstream's legacy flow, which
//! non-CSI provisioners use).

use std::collections::BTreeMap;

use contracts::cdi::sizing::required_space;
use contracts::cdi::{ImportSource, SourceKind, TransferRequest};
use contracts::quantity::{self, parse_bytes};
use crds::cdi::consts::{ann, label};
use crds::cdi::datavolume::{DataVolume, DataVolumeSource};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

/// Why a DataVolume cannot be turned into a PVC (reported as condition reason `ErrClaimNotValid`).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClaimError {
    /// Neither `pvc` nor `storage` (the API server normally refuses this).
    #[error("DataVolume has no pvc or storage spec")]
    NoStorage,
    /// No size and nothing to infer it from.
    #[error("DataVolume.storage spec is missing the storage size and it cannot be inferred")]
    NoSize,
    /// A size that does not parse.
    #[error(transparent)]
    Size(#[from] quantity::InvalidQuantity),
    /// No storage class given and the cluster has no default.
    #[error("no storage class specified and no default storage class found")]
    NoStorageClass,
    /// The DV has no source (sourceRef is refused by the API server).
    #[error("DataVolume has no source")]
    NoSource,
}

/// What the cluster says about the storage the claim will use (read before planning).
#[derive(Debug, Clone, Default)]
pub struct StorageFacts {
    /// Name of the resolved storage class (explicit, default virt class, or default class).
    pub class: Option<String>,
    /// Access modes from the StorageProfile (first claim property set).
    pub profile_access_modes: Option<Vec<String>>,
    /// Volume mode from the StorageProfile.
    pub profile_volume_mode: Option<String>,
    /// Filesystem overhead for that class.
    pub overhead: f64,
    /// Minimum PVC size of the class, if any.
    pub minimum_size: Option<u64>,
    /// For clones without a size: the source PVC's requested size.
    pub clone_source_size: Option<String>,
}

/// Annotations of the DataVolume that are not copied to the PVC.
const NOT_COPIED: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

fn is_kubevirt_label(key: &str) -> bool {
    // ^([\w.]+\.kubevirt.io|kubevirt.io)/[\w.-]+$
    let Some((prefix, name)) = key.split_once('/') else { return false };
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let prefix_ok = prefix == "kubevirt.io"
        || prefix.strip_suffix(".kubevirt.io").is_some_and(|p| !p.is_empty() && p.chars().all(|c| word(c) || c == '.'));
    prefix_ok && !name.is_empty() && name.chars().all(|c| word(c) || c == '.' || c == '-')
}

/// The transfer a DataVolume source asks for (`dv_namespace` completes a clone source without a namespace);
/// `None` for sources this implementation does not transfer (gcs, snapshot, imageio, vddk: refused at admission).
pub fn transfer_request(source: &DataVolumeSource, dv_namespace: &str) -> Option<TransferRequest> {
    if let Some(h) = &source.http {
        let mut s = ImportSource::new(SourceKind::Http, &h.url);
        s.secret = h.secret_ref.clone();
        s.cert_config_map = h.cert_config_map.clone();
        s.checksum = h.checksum.clone();
        s.insecure_skip_verify = h.insecure_skip_verify == Some(true);
        s.extra_headers = h.extra_headers.clone().unwrap_or_default();
        s.secret_extra_headers = h.secret_extra_headers.clone().unwrap_or_default();
        Some(TransferRequest::Import(s))
    } else if let Some(s3) = &source.s3 {
        let mut s = ImportSource::new(SourceKind::S3, &s3.url);
        s.secret = s3.secret_ref.clone();
        s.cert_config_map = s3.cert_config_map.clone();
        Some(TransferRequest::Import(s))
    } else if let Some(r) = &source.registry {
        let mut s = ImportSource::new(SourceKind::Registry, r.url.as_deref().unwrap_or_default());
        s.registry_import_method = Some(r.pull_method.as_deref().filter(|m| !m.is_empty()).unwrap_or("pod").to_owned());
        s.secret = r.secret_ref.clone();
        s.cert_config_map = r.cert_config_map.clone();
        s.registry_architecture = r.platform.as_ref().and_then(|p| p.architecture.clone());
        Some(TransferRequest::Import(s))
    } else if source.blank.is_some() {
        Some(TransferRequest::Import(ImportSource::new(SourceKind::Blank, "")))
    } else if source.upload.is_some() {
        Some(TransferRequest::Upload)
    } else {
        source.pvc.as_ref().map(|p| TransferRequest::Clone {
            namespace: if p.namespace.is_empty() { dv_namespace.to_owned() } else { p.namespace.clone() },
            name: p.name.clone(),
        })
    }
}

/// Renders the DataVolume's PVC (same name and namespace, controller-owned by the DV).
pub fn render(dv: &DataVolume, facts: &StorageFacts) -> Result<PersistentVolumeClaim, ClaimError> {
    let source = dv.spec.source.as_ref().ok_or(ClaimError::NoSource)?;
    let is_clone = source.pvc.is_some();
    let mut spec = if let Some(pvc) = &dv.spec.pvc {
        pvc.clone()
    } else if let Some(st) = &dv.spec.storage {
        let requested = st.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("storage"));
        let volume_mode = st.volume_mode.clone().or_else(|| facts.profile_volume_mode.clone());
        let block = volume_mode.as_deref() == Some("Block");
        let size = match requested {
            Some(q) => {
                let bytes = parse_bytes(&q.0)?;
                let mut bytes = if block { bytes } else { required_space(facts.overhead, bytes) };
                if let Some(min) = facts.minimum_size {
                    bytes = bytes.max(min);
                }
                Quantity(bytes.to_string())
            }
            None if is_clone => Quantity(facts.clone_source_size.clone().ok_or(ClaimError::NoSize)?),
            None => return Err(ClaimError::NoSize),
        };
        let class = st.storage_class_name.clone().or_else(|| facts.class.clone());
        PersistentVolumeClaimSpec {
            access_modes: st
                .access_modes
                .clone()
                .filter(|m| !m.is_empty())
                .or_else(|| facts.profile_access_modes.clone())
                .or_else(|| Some(vec!["ReadWriteOnce".into()])),
            selector: st.selector.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), size)])),
                limits: None,
            }),
            volume_name: st.volume_name.clone(),
            storage_class_name: class,
            volume_mode: Some(volume_mode.unwrap_or_else(|| "Filesystem".into())),
            data_source: st.data_source.clone(),
            data_source_ref: st.data_source_ref.clone(),
            ..Default::default()
        }
    } else {
        return Err(ClaimError::NoStorage);
    };
    if spec.storage_class_name.is_none() && dv.spec.storage.is_some() {
        return Err(ClaimError::NoStorageClass);
    }
    // The `pvc` form is used verbatim: Kubernetes applies its own defaults (class, Filesystem).
    if spec.volume_mode.is_none() && dv.spec.pvc.is_some() {
        spec.volume_mode = None;
    }
    let block = spec.volume_mode.as_deref() == Some("Block");

    let mut annotations: BTreeMap<String, String> = dv
        .annotations()
        .iter()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(request) = transfer_request(source, &dv.namespace().unwrap_or_default()) {
        annotations.extend(request.to_annotations());
    }
    let content_type = dv.spec.content_type.unwrap_or_default();
    annotations.insert(ann::CONTENT_TYPE.into(), content_type.as_str().into());
    annotations.insert(ann::POD_RESTARTS.into(), "0".into());
    if let Some(uid) = dv.uid() {
        annotations.insert(ann::CREATED_FOR_DATAVOLUME.into(), uid);
    }
    if let Some(p) = dv.spec.preallocation {
        annotations.insert(ann::PREALLOCATION_REQUESTED.into(), p.to_string());
    }
    if let Some(p) = &dv.spec.priority_class_name {
        annotations.insert(ann::PRIORITY_CLASS.into(), p.clone());
    }
    if let Some(sa) = &dv.spec.service_account_name {
        annotations.insert(ann::SERVICE_ACCOUNT.into(), sa.clone());
    }

    let mut labels: BTreeMap<String, String> =
        dv.labels().iter().filter(|(k, _)| is_kubevirt_label(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    labels.insert(label::APP.into(), label::APP_VALUE.into());
    if !block {
        labels.insert(label::FILLING_UP_ALERT.into(), "disabled".into());
    }

    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(dv.name_any()),
            namespace: dv.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: dv.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::cdi::datavolume::{DataVolumeSpec, HttpSource, PvcSource, StorageSpec};

    fn dv(spec: DataVolumeSpec) -> DataVolume {
        let mut d = DataVolume::new("disk", spec);
        d.metadata.namespace = Some("ns".into());
        d.metadata.uid = Some("uid-1".into());
        d.metadata.labels = Some(BTreeMap::from([
            ("instancetype.kubevirt.io/default-preference".to_owned(), "fedora".to_owned()),
            ("team".to_owned(), "x".to_owned()),
        ]));
        d
    }

    fn storage(size: Option<&str>, mode: Option<&str>) -> StorageSpec {
        StorageSpec {
            resources: size.map(|s| VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(s.to_owned()))])),
                limits: None,
            }),
            volume_mode: mode.map(str::to_owned),
            ..Default::default()
        }
    }

    fn http(url: &str) -> DataVolumeSource {
        DataVolumeSource {
            http: Some(HttpSource {
                url: url.into(),
                checksum: Some("sha256:ab".into()),
                extra_headers: Some(vec!["X-A: 1".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn facts() -> StorageFacts {
        StorageFacts { class: Some("local".into()), overhead: 0.06, ..Default::default() }
    }

    #[test]
    fn storage_form_is_inflated_and_annotated() {
        let d = dv(DataVolumeSpec {
            source: Some(http("http://h/x.qcow2")),
            storage: Some(storage(Some("500Mi"), None)),
            ..Default::default()
        });
        let pvc = render(&d, &facts()).unwrap_or_else(|e| panic!("{e}"));
        let spec = pvc.spec.clone().unwrap_or_default();
        let size = &spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"];
        assert_eq!(size.0, "555745280");
        assert_eq!(spec.storage_class_name.as_deref(), Some("local"));
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
        let a = pvc.annotations();
        assert_eq!(a[ann::SOURCE], "http");
        assert_eq!(a[ann::ENDPOINT], "http://h/x.qcow2");
        assert_eq!(a[ann::CHECKSUM], "sha256:ab");
        assert_eq!(a["cdi.kubevirt.io/storage.import.extraHeaders.0"], "X-A: 1");
        assert_eq!(a[ann::CONTENT_TYPE], "kubevirt");
        assert_eq!(a[ann::POD_RESTARTS], "0");
        assert_eq!(a[ann::CREATED_FOR_DATAVOLUME], "uid-1");
        let l = pvc.labels();
        assert_eq!(l["app"], "containerized-data-importer");
        assert_eq!(l[label::FILLING_UP_ALERT], "disabled");
        assert_eq!(l["instancetype.kubevirt.io/default-preference"], "fedora");
        assert!(!l.contains_key("team"));
        let owner = &pvc.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("DataVolume", Some(true)));
    }

    #[test]
    fn block_is_not_inflated_and_has_no_filling_label() {
        let d = dv(DataVolumeSpec {
            source: Some(DataVolumeSource { blank: Some(Default::default()), ..Default::default() }),
            storage: Some(storage(Some("1Gi"), Some("Block"))),
            ..Default::default()
        });
        let pvc = render(&d, &facts()).unwrap_or_else(|e| panic!("{e}"));
        let spec = pvc.spec.clone().unwrap_or_default();
        assert_eq!(spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"].0, "1073741824");
        assert!(!pvc.labels().contains_key(label::FILLING_UP_ALERT));
        assert_eq!(pvc.annotations()[ann::SOURCE], "none");
    }

    #[test]
    fn pvc_form_is_verbatim_and_clone_size_is_inferred() {
        let verbatim = PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity("1Gi".into()))])),
                limits: None,
            }),
            ..Default::default()
        };
        let d = dv(DataVolumeSpec {
            source: Some(DataVolumeSource { upload: Some(Default::default()), ..Default::default() }),
            pvc: Some(verbatim.clone()),
            ..Default::default()
        });
        let pvc = render(&d, &facts()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pvc.spec, Some(verbatim));
        assert_eq!(pvc.annotations()[ann::UPLOAD_TARGET], "");

        let clone = dv(DataVolumeSpec {
            source: Some(DataVolumeSource {
                pvc: Some(PvcSource { namespace: "src".into(), name: "golden".into() }),
                ..Default::default()
            }),
            storage: Some(storage(None, None)),
            ..Default::default()
        });
        assert_eq!(render(&clone, &facts()), Err(ClaimError::NoSize));
        let f = StorageFacts { clone_source_size: Some("2Gi".into()), ..facts() };
        let pvc = render(&clone, &f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pvc.annotations()[ann::CLONE_REQUEST], "src/golden");
        let spec = pvc.spec.unwrap_or_default();
        assert_eq!(spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"].0, "2Gi");
    }

    #[test]
    fn kubevirt_label_pattern() {
        assert!(is_kubevirt_label("kubevirt.io/os"));
        assert!(is_kubevirt_label("instancetype.kubevirt.io/default-instancetype"));
        assert!(!is_kubevirt_label("example.com/x"));
        assert!(!is_kubevirt_label("kubevirt.io/"));
        assert!(!is_kubevirt_label(".kubevirt.io/x"));
    }
}
