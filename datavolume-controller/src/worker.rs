//! PVC → worker objects, as pure functions: the importer pod (CDI's env/volume/security contract,
//! `specs/cdi.md` §2.1–2.3), the scratch PVC (§2.6), the upload-server pod and Service (§4.3), and the
//! clone-source pod (our host-assisted copy: the source pod serves the source volume read-only over HTTPS,
//! the target is an ordinary importer pod that imports from it).

use std::collections::BTreeMap;

use crds::cdi::config::ImportProxy;
use crds::cdi::consts::{self, ann, label};
use crds::cdi::naming;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    LocalObjectReference, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeDevice, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::quantity::{self, parse_bytes, required_space, usable_space};

/// Images and worker settings (from the controller's env and the effective CDIConfig).
#[derive(Debug, Clone, Default)]
pub struct WorkerConfig {
    /// `IMPORTER_IMAGE`.
    pub importer_image: String,
    /// `CLONER_IMAGE` (the clone-source server; our importer image serves it).
    pub cloner_image: String,
    /// `UPLOADSERVER_IMAGE`.
    pub uploadserver_image: String,
    /// `PULL_POLICY`.
    pub pull_policy: String,
    /// Worker resources (`CDIConfig.status.defaultPodResourceRequirements`).
    pub resources: ResourceRequirements,
    /// `-v=N` of worker pods.
    pub verbosity: i32,
    /// Registries reached without TLS verification.
    pub insecure_registries: Vec<String>,
    /// Proxy settings for importers.
    pub import_proxy: Option<ImportProxy>,
    /// Pull secrets of worker pods.
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Default preallocation.
    pub preallocation: bool,
    /// Explicit scratch storage class.
    pub scratch_class: Option<String>,
}

/// What a PVC asks for, read from its CDI annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Import from a source (`storage.import.source` or endpoint present); `none` is a blank image.
    Import,
    /// Upload target.
    Upload,
    /// Host-assisted clone from `namespace/name`.
    Clone {
        /// Source namespace.
        namespace: String,
        /// Source PVC name.
        name: String,
    },
}

impl Work {
    /// Reads the work from PVC annotations; `None` when the PVC is not a CDI target.
    pub fn of(pvc: &PersistentVolumeClaim) -> Option<Work> {
        let a = pvc.annotations();
        if let Some(req) = a.get(ann::CLONE_REQUEST) {
            let (ns, name) = req.split_once('/')?;
            return Some(Work::Clone { namespace: ns.to_owned(), name: name.to_owned() });
        }
        if a.contains_key(ann::UPLOAD_TARGET) {
            return Some(Work::Upload);
        }
        (a.contains_key(ann::SOURCE) || a.contains_key(ann::ENDPOINT)).then_some(Work::Import)
    }
}

/// Per-pod choices the worker controller makes from the PVC's history.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Mount a scratch PVC at `/scratch`.
    pub scratch: bool,
    /// The last pod was OOM-killed: `CACHE_MODE=TRYNONE`.
    pub direct_io: bool,
    /// Clone target: import from this clone-source endpoint with the token Secret.
    pub clone: Option<CloneEndpoint>,
    /// Filesystem overhead of the PVC's class.
    pub overhead: f64,
}

/// Where a clone target's importer reads from.
#[derive(Debug, Clone)]
pub struct CloneEndpoint {
    /// `https://<source-pod-ip>:8443/disk.img`.
    pub url: String,
    /// Secret (target namespace) with key `header` = `Authorization: Bearer <token>`.
    pub header_secret: String,
}

fn is_block(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block")
}

fn requested(pvc: &PersistentVolumeClaim) -> Option<&Quantity> {
    pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: secret.into(), key: key.into(), optional: Some(false) }),
            ..Default::default()
        }),
    }
}

fn owner(pvc: &PersistentVolumeClaim) -> Option<Vec<OwnerReference>> {
    pvc.controller_owner_ref(&()).map(|o| vec![o])
}

/// Restricted security context CDI gives every worker container.
pub fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        run_as_non_root: Some(true),
        run_as_user: Some(consts::WORKER_UID),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    }
}

fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        fs_group: Some(consts::WORKER_UID),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    }
}

/// Annotations for worker pods: CDI's marker, sidecar-injection defaults and the PVC's network annotations.
fn pod_annotations(pvc: &PersistentVolumeClaim) -> BTreeMap<String, String> {
    let a = pvc.annotations();
    let mut out = BTreeMap::from([
        (ann::CREATED_BY_CONTROLLER.to_owned(), "yes".to_owned()),
        (ann::ISTIO_INJECT.to_owned(), a.get(ann::ISTIO_INJECT).cloned().unwrap_or_else(|| "false".into())),
        (ann::LINKERD_INJECT.to_owned(), a.get(ann::LINKERD_INJECT).cloned().unwrap_or_else(|| "disabled".into())),
    ]);
    for k in [ann::MULTUS_NETWORKS, ann::MULTUS_DEFAULT_NETWORK] {
        if let Some(v) = a.get(k) {
            out.insert(k.to_owned(), v.clone());
        }
    }
    out
}

fn pod_labels(pvc: &PersistentVolumeClaim, worker: &str) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = pvc.labels().clone();
    l.insert(label::APP.into(), label::APP_VALUE.into());
    l.insert(label::CDI.into(), worker.into());
    l.insert(label::PROMETHEUS.into(), "true".into());
    l
}

/// The target volume (`cdi-data-vol`) as a pod volume plus the container's mount or device.
fn data_volume(pvc_name: &str, block: bool, read_only: bool) -> (Volume, Option<VolumeMount>, Option<VolumeDevice>) {
    let volume = Volume {
        name: consts::DATA_VOLUME_NAME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc_name.into(),
            read_only: read_only.then_some(true),
        }),
        ..Default::default()
    };
    if block {
        (
            volume,
            None,
            Some(VolumeDevice { name: consts::DATA_VOLUME_NAME.into(), device_path: consts::BLOCK_DEVICE.into() }),
        )
    } else {
        let mount = VolumeMount {
            name: consts::DATA_VOLUME_NAME.into(),
            mount_path: consts::DATA_DIR.into(),
            read_only: read_only.then_some(true),
            ..Default::default()
        };
        (volume, Some(mount), None)
    }
}

fn scratch_volume(pvc_name: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: consts::SCRATCH_VOLUME_NAME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: naming::scratch_pvc(pvc_name),
                read_only: None,
            }),
            ..Default::default()
        },
        VolumeMount {
            name: consts::SCRATCH_VOLUME_NAME.into(),
            mount_path: consts::SCRATCH_DIR.into(),
            ..Default::default()
        },
    )
}

fn metrics_port() -> ContainerPort {
    ContainerPort {
        name: Some(consts::METRICS_PORT_NAME.into()),
        container_port: consts::WORKER_PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The container fields every worker shares: image and pull policy, command, env, the `metrics`/worker port,
/// resources, CDI's restricted security context, the termination-message policy, mounts and devices.
fn worker_container(
    name: &str,
    image: &str,
    command: Vec<String>,
    cfg: &WorkerConfig,
    envs: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
    device: Option<VolumeDevice>,
) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some(cfg.pull_policy.clone()),
        command: Some(command),
        env: Some(envs),
        ports: Some(vec![metrics_port()]),
        resources: Some(cfg.resources.clone()),
        security_context: Some(container_security()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        volume_devices: device.map(|d| vec![d]),
        ..Default::default()
    }
}

/// Readiness probe: HTTPS GET `/healthz` on the worker port.
fn healthz_probe(initial_delay: Option<i32>, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(consts::WORKER_PORT),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        initial_delay_seconds: initial_delay,
        period_seconds: Some(period),
        ..Default::default()
    }
}

/// `OWNER_UID`: the UID of the PVC's sole owner (the DV), else the PVC's own UID.
pub fn owner_uid(pvc: &PersistentVolumeClaim) -> String {
    match pvc.owner_references() {
        [only] => only.uid.clone(),
        _ => pvc.uid().unwrap_or_default(),
    }
}

fn preallocation(pvc: &PersistentVolumeClaim, cfg: &WorkerConfig) -> bool {
    pvc.annotations().get(ann::PREALLOCATION_REQUESTED).map_or(cfg.preallocation, |v| v == "true")
}

fn registry_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("docker://")?;
    rest.split('/').next()
}

/// The importer pod for `pvc` (name `importer-<pvc>`), controller-owned by the PVC.
pub fn importer_pod(pvc: &PersistentVolumeClaim, cfg: &WorkerConfig, opts: &ImportOptions) -> Pod {
    let a = pvc.annotations();
    let name = pvc.name_any();
    let block = is_block(pvc);
    let get = |k: &str| a.get(k).cloned().unwrap_or_default();
    let mut source = a.get(ann::SOURCE).cloned().unwrap_or_else(|| "http".into());
    let mut endpoint = get(ann::ENDPOINT);
    let mut insecure = a.get(ann::INSECURE_SKIP_VERIFY).is_some_and(|v| v == "true");
    if source == "registry" && registry_host(&endpoint).is_some_and(|h| cfg.insecure_registries.iter().any(|r| r == h))
    {
        insecure = true;
    }
    if let Some(c) = &opts.clone {
        source = "http".into();
        endpoint = c.url.clone();
        insecure = true;
    }
    let mut envs = vec![
        env("IMPORTER_SOURCE", &source),
        env("IMPORTER_ENDPOINT", &endpoint),
        env("IMPORTER_CONTENTTYPE", a.get(ann::CONTENT_TYPE).cloned().unwrap_or_else(|| "kubevirt".into())),
        env("IMPORTER_IMAGE_SIZE", requested(pvc).map(|q| q.0.clone()).unwrap_or_default()),
        env("OWNER_UID", owner_uid(pvc)),
        env("FILESYSTEM_OVERHEAD", if block { "0".to_owned() } else { format_overhead(opts.overhead) }),
        env("INSECURE_TLS", insecure.to_string()),
        env("PREALLOCATION", preallocation(pvc, cfg).to_string()),
    ];
    if opts.direct_io {
        envs.push(env("CACHE_MODE", "TRYNONE"));
    }
    if opts.clone.is_none() {
        if let Some(c) = a.get(ann::CHECKSUM) {
            envs.push(env("IMPORTER_CHECKSUM", c));
        }
        if let Some(arch) = a.get(ann::REGISTRY_ARCHITECTURE) {
            envs.push(env("IMPORTER_REGISTRY_IMAGE_ARCHITECTURE", arch));
        }
    }
    if let Some(p) = &cfg.import_proxy {
        for (k, v) in [("http_proxy", &p.http_proxy), ("https_proxy", &p.https_proxy), ("no_proxy", &p.no_proxy)] {
            if let Some(v) = v {
                envs.push(env(k, v));
            }
        }
    }
    let (data, mount, device) = data_volume(&name, block, false);
    let mut volumes = vec![data];
    let mut mounts: Vec<VolumeMount> = mount.into_iter().collect();
    if opts.clone.is_none() {
        if let Some(secret) = a.get(ann::SECRET).filter(|s| !s.is_empty()) {
            envs.push(secret_env("IMPORTER_ACCESS_KEY_ID", secret, "accessKeyId"));
            envs.push(secret_env("IMPORTER_SECRET_KEY", secret, "secretKey"));
        }
        if let Some(cm) = a.get(ann::CERT_CONFIG_MAP).filter(|s| !s.is_empty()) {
            envs.push(env("IMPORTER_CERT_DIR", "/certs"));
            volumes.push(Volume {
                name: "cdi-cert-vol".into(),
                config_map: Some(ConfigMapVolumeSource { name: cm.clone(), ..Default::default() }),
                ..Default::default()
            });
            mounts.push(VolumeMount { name: "cdi-cert-vol".into(), mount_path: "/certs".into(), ..Default::default() });
        }
        let mut headers: Vec<(&String, &String)> =
            a.iter().filter(|(k, _)| k.starts_with(ann::EXTRA_HEADERS_PREFIX)).collect();
        headers.sort_by_key(|(k, _)| k[ann::EXTRA_HEADERS_PREFIX.len()..].parse::<u32>().unwrap_or(u32::MAX));
        for (i, (_, v)) in headers.into_iter().enumerate() {
            envs.push(env(&format!("IMPORTER_EXTRA_HEADER_{i}"), v.as_str()));
        }
    }
    let mut secret_headers: Vec<String> = match &opts.clone {
        Some(c) => vec![c.header_secret.clone()],
        None => {
            let mut v: Vec<(&String, &String)> =
                a.iter().filter(|(k, _)| k.starts_with(ann::SECRET_EXTRA_HEADERS_PREFIX)).collect();
            v.sort_by_key(|(k, _)| k[ann::SECRET_EXTRA_HEADERS_PREFIX.len()..].parse::<u32>().unwrap_or(u32::MAX));
            v.into_iter().map(|(_, s)| s.clone()).collect()
        }
    };
    for (i, secret) in secret_headers.drain(..).enumerate() {
        let vol = format!("cdi-extra-headers-vol-{i}");
        volumes.push(Volume {
            name: vol.clone(),
            secret: Some(SecretVolumeSource { secret_name: Some(secret), ..Default::default() }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: vol,
            mount_path: format!("/extraheaders/{i}"),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if opts.scratch {
        let (v, m) = scratch_volume(&name);
        volumes.push(v);
        mounts.push(m);
    }
    let mut container =
        worker_container("importer", &cfg.importer_image, vec!["importer".into()], cfg, envs, mounts, device);
    container.args = Some(vec![format!("-v={}", cfg.verbosity)]);
    worker_pod(pvc, cfg, naming::importer_pod(&name), "importer", container, volumes)
}

fn worker_pod(
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    name: String,
    worker: &str,
    container: Container,
    volumes: Vec<Volume>,
) -> Pod {
    let a = pvc.annotations();
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: pvc.namespace(),
            labels: Some(pod_labels(pvc, worker)),
            annotations: Some(pod_annotations(pvc)),
            owner_references: owner(pvc),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            volumes: Some(volumes),
            restart_policy: Some("OnFailure".into()),
            enable_service_links: Some(false),
            security_context: Some(pod_security()),
            priority_class_name: a.get(ann::PRIORITY_CLASS).cloned(),
            service_account_name: a.get(ann::SERVICE_ACCOUNT).cloned(),
            image_pull_secrets: (!cfg.image_pull_secrets.is_empty()).then(|| cfg.image_pull_secrets.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

fn format_overhead(o: f64) -> String {
    let s = format!("{o:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.to_owned() }
}

/// The scratch PVC (`<pvc>-scratch`, always Filesystem, RWO), owned by the worker pod `owner_pod`.
pub fn scratch_pvc(
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    target_overhead: f64,
    scratch_overhead: f64,
    owner_pod: &Pod,
) -> Result<PersistentVolumeClaim, quantity::InvalidQuantity> {
    let req = requested(pvc).map(|q| parse_bytes(&q.0)).transpose()?.unwrap_or(quantity::MIB);
    let usable = usable_space(if is_block(pvc) { 0.0 } else { target_overhead }, req);
    let size = required_space(scratch_overhead, usable).div_ceil(quantity::MIB) * quantity::MIB;
    let class = cfg.scratch_class.clone().or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()));
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(naming::scratch_pvc(&pvc.name_any())),
            namespace: pvc.namespace(),
            labels: Some(BTreeMap::from([
                (label::APP.to_owned(), label::APP_VALUE.to_owned()),
                (label::EXCLUDE_FROM_BACKUP.to_owned(), "true".to_owned()),
            ])),
            owner_references: owner_pod.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            volume_mode: Some("Filesystem".into()),
            storage_class_name: class,
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(size.to_string()))])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// Name of the Secret holding an upload server's TLS material (same as its pod and Service).
pub fn upload_tls_secret(pvc: &str) -> String {
    naming::upload_server(pvc)
}

/// The upload-server pod `cdi-upload-<pvc>` (contract in `uploader/README.md`).
pub fn upload_pod(pvc: &PersistentVolumeClaim, cfg: &WorkerConfig, overhead: f64, deadline: &str) -> Pod {
    let name = pvc.name_any();
    let block = is_block(pvc);
    let server = naming::upload_server(&name);
    let envs = vec![
        env("UPLOAD_IMAGE_SIZE", requested(pvc).map(|q| q.0.clone()).unwrap_or_default()),
        env("TLS_KEY_FILE", "/etc/tls/tls.key"),
        env("TLS_CERT_FILE", "/etc/tls/tls.crt"),
        env("CLIENT_CERT_FILE", "/etc/tls/ca.crt"),
        env("CLIENT_NAME", consts::UPLOAD_CLIENT_NAME),
        env(
            "DESTINATION",
            if block { consts::BLOCK_DEVICE.to_owned() } else { format!("{}/disk.img", consts::DATA_DIR) },
        ),
        env("DEADLINE", deadline),
        env("LISTEN_PORT", consts::WORKER_PORT.to_string()),
        env("PREALLOCATION", preallocation(pvc, cfg).to_string()),
        env("FILESYSTEM_OVERHEAD", if block { "0".to_owned() } else { format_overhead(overhead) }),
        env("OWNER_UID", owner_uid(pvc)),
    ];
    let (data, mount, device) = data_volume(&name, block, false);
    let (scratch, scratch_mount) = scratch_volume(&name);
    let tls = Volume {
        name: "tls-config".into(),
        secret: Some(SecretVolumeSource { secret_name: Some(upload_tls_secret(&name)), ..Default::default() }),
        ..Default::default()
    };
    let mut mounts: Vec<VolumeMount> = mount.into_iter().collect();
    mounts.push(scratch_mount);
    mounts.push(VolumeMount {
        name: "tls-config".into(),
        mount_path: "/etc/tls".into(),
        read_only: Some(true),
        ..Default::default()
    });
    let mut container = worker_container(
        "cdi-upload-server",
        &cfg.uploadserver_image,
        vec!["uploadserver".into()],
        cfg,
        envs,
        mounts,
        device,
    );
    container.args = Some(vec![format!("-v={}", cfg.verbosity)]);
    container.readiness_probe = Some(healthz_probe(Some(2), 5));
    let mut pod = worker_pod(pvc, cfg, server.clone(), "cdi-upload-server", container, vec![data, scratch, tls]);
    if let Some(l) = pod.metadata.labels.as_mut() {
        l.insert(label::UPLOAD_SERVER.into(), server);
        if let Some(uid) = pvc.uid() {
            l.insert(label::UPLOAD_TARGET.into(), uid);
        }
    }
    pod
}

/// The Service `cdi-upload-<pvc>` (port 8443) in front of the upload-server pod.
pub fn upload_service(pvc: &PersistentVolumeClaim) -> Service {
    let server = naming::upload_server(&pvc.name_any());
    Service {
        metadata: ObjectMeta {
            name: Some(server.clone()),
            namespace: pvc.namespace(),
            labels: Some(BTreeMap::from([
                (label::APP.to_owned(), label::APP_VALUE.to_owned()),
                (label::CDI.to_owned(), "cdi-upload-server".to_owned()),
            ])),
            owner_references: owner(pvc),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([(label::UPLOAD_SERVER.to_owned(), server)])),
            ports: Some(vec![ServicePort {
                name: Some("uploadserver".into()),
                port: consts::WORKER_PORT,
                target_port: Some(IntOrString::Int(consts::WORKER_PORT)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// Secret key of the clone token in the source namespace's Secret.
pub const CLONE_TOKEN_KEY: &str = "token";

/// The clone-source pod `<target-uid>-source-pod` in the source namespace: serves the source PVC read-only
/// (`importer serve`) at `https://<pod-ip>:8443/disk.img` for the bearer token in Secret `token_secret`.
pub fn clone_source_pod(
    target: &PersistentVolumeClaim,
    source: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    token_secret: &str,
) -> Pod {
    let block = is_block(source);
    let (data, mount, device) = data_volume(&source.name_any(), block, true);
    let token = Volume {
        name: "clone-token".into(),
        secret: Some(SecretVolumeSource { secret_name: Some(token_secret.into()), ..Default::default() }),
        ..Default::default()
    };
    let mut mounts: Vec<VolumeMount> = mount.into_iter().collect();
    mounts.push(VolumeMount {
        name: "clone-token".into(),
        mount_path: "/clone-token".into(),
        read_only: Some(true),
        ..Default::default()
    });
    let path = if block { consts::BLOCK_DEVICE.to_owned() } else { format!("{}/disk.img", consts::DATA_DIR) };
    let mut container = worker_container(
        "cdi-clone-source",
        &cfg.cloner_image,
        vec!["importer".into(), "serve".into()],
        cfg,
        vec![
            env("SERVE_PATH", path),
            env("SERVE_TOKEN_FILE", format!("/clone-token/{CLONE_TOKEN_KEY}")),
            env("OWNER_UID", owner_uid(target)),
        ],
        mounts,
        device,
    );
    container.ports = Some(vec![ContainerPort {
        name: Some("clone".into()),
        container_port: consts::WORKER_PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    }]);
    container.readiness_probe = Some(healthz_probe(None, 2));
    let target_uid = target.uid().unwrap_or_default();
    let mut pod = worker_pod(
        source,
        cfg,
        naming::clone_source_pod(&target_uid),
        "cdi-clone-source",
        container,
        vec![data, token],
    );
    pod.metadata.owner_references = None;
    pod.metadata.labels = Some(BTreeMap::from([
        (label::APP.to_owned(), label::APP_VALUE.to_owned()),
        (label::CDI.to_owned(), "cdi-clone-source".to_owned()),
    ]));
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.insert(
            CLONE_TARGET_ANNOTATION.into(),
            format!("{}/{}", target.namespace().unwrap_or_default(), target.name_any()),
        );
    }
    pod
}

/// Annotation on clone-source pods naming their target PVC `<namespace>/<name>` (pods in another namespace cannot
/// carry an owner reference).
pub const CLONE_TARGET_ANNOTATION: &str = "cdi.kubevirt.io/storage.clone.target";
