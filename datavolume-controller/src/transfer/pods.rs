//! PVC → worker objects, as pure functions: the importer pod (CDI's env/volume/security contract,
//! `specs/cdi.md` §2.1–2.3, its environment from [`ImporterEnv`]), the scratch PVC (§2.6), the upload-server pod
//! ([`UploadServerEnv`]) and Service (§4.3), and the clone-source pod (our host-assisted copy: the source pod
//! serves the source volume read-only over HTTPS ([`CloneSourceEnv`]), the target is an ordinary importer pod
//! that imports from it).

use std::collections::BTreeMap;

use contracts::cdi::env::{EnvEntry, EnvValue};
use contracts::cdi::sizing::{required_space, usable_space};
use contracts::cdi::{
    ClaimOptions, CloneSourceEnv, Credentials, ImportSource, ImporterEnv, OvaDiskEnv, ProxyEnv, SourceKind,
    UploadServerEnv,
};
use contracts::quantity::{ByteQuantity, InvalidQuantity, MIB};
use crds::cdi::config::ImportProxy;
use crds::cdi::consts::label::worker;
use crds::cdi::consts::{self, ann, label};
use crds::cdi::naming;
use crds::cdi::operator::NodePlacement;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    LocalObjectReference, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, Secret, SecretKeySelector,
    SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeDevice, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

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
    /// The CDI installation's `spec.workloads`: every worker pod's node selector, affinity and tolerations.
    pub placement: Option<NodePlacement>,
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

/// The pod-spec form of a worker environment from `contracts`.
fn k8s_env(entries: Vec<EnvEntry>) -> Vec<EnvVar> {
    entries
        .into_iter()
        .map(|e| match e.value {
            EnvValue::Literal(v) => EnvVar { name: e.name, value: Some(v), value_from: None },
            EnvValue::SecretKey { secret, key } => EnvVar {
                name: e.name,
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: secret, key, optional: Some(false) }),
                    ..Default::default()
                }),
            },
        })
        .collect()
}

/// The PVC's requested size as written (`None` without a request).
fn image_size(pvc: &PersistentVolumeClaim) -> Result<Option<ByteQuantity>, InvalidQuantity> {
    requested(pvc).map(|q| ByteQuantity::parse(&q.0)).transpose()
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
    ClaimOptions::of(pvc.annotations()).preallocation.unwrap_or(cfg.preallocation)
}

fn registry_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("docker://")?;
    rest.split('/').next()
}

/// The importer's environment for `source` (the claim's import source, or the clone endpoint).
fn importer_env(
    pvc: &PersistentVolumeClaim,
    source: &ImportSource,
    cfg: &WorkerConfig,
    opts: &ImportOptions,
) -> Result<ImporterEnv, InvalidQuantity> {
    let block = is_block(pvc);
    let registry_insecure = source.kind == SourceKind::Registry
        && registry_host(&source.endpoint).is_some_and(|h| cfg.insecure_registries.iter().any(|r| r == h));
    let proxy = cfg.import_proxy.as_ref().map_or_else(ProxyEnv::default, |p| ProxyEnv {
        http_proxy: p.http_proxy.clone(),
        https_proxy: p.https_proxy.clone(),
        no_proxy: p.no_proxy.clone(),
    });
    let mut env = ImporterEnv {
        source: source.kind.clone(),
        endpoint: source.endpoint.clone(),
        content_type: ClaimOptions::of(pvc.annotations()).content_type,
        image_size: image_size(pvc)?,
        owner_uid: owner_uid(pvc),
        filesystem_overhead: if block { 0.0 } else { opts.overhead },
        insecure_tls: source.insecure_skip_verify || registry_insecure,
        preallocation: preallocation(pvc, cfg),
        direct_io: opts.direct_io,
        checksum: source.checksum.clone(),
        registry_architecture: source.registry_architecture.clone(),
        credentials: source.secret.clone().map(Credentials::FromSecret),
        cert_dir: source.cert_config_map.as_ref().map(|_| CERT_DIR.to_owned()),
        extra_headers: source.extra_headers.clone(),
        proxy,
    };
    if let Some(c) = &opts.clone {
        // A clone target imports from the clone-source pod: only its endpoint, TLS unchecked (its certificate is
        // self-signed), the bearer token as a secret header.
        env = ImporterEnv {
            source: SourceKind::Http,
            endpoint: c.url.clone(),
            insecure_tls: true,
            checksum: None,
            registry_architecture: None,
            credentials: None,
            cert_dir: None,
            extra_headers: Vec::new(),
            ..env
        };
    }
    Ok(env)
}

/// Mount point of the `certConfigMap` in importer pods.
const CERT_DIR: &str = "/certs";

/// The importer pod for `pvc` (name `importer-<pvc>`), controller-owned by the PVC, importing `source` (or the
/// clone endpoint in `opts`).
pub fn importer_pod(
    pvc: &PersistentVolumeClaim,
    source: &ImportSource,
    cfg: &WorkerConfig,
    opts: &ImportOptions,
) -> Result<Pod, InvalidQuantity> {
    let name = pvc.name_any();
    let env = importer_env(pvc, source, cfg, opts)?;
    let (data, mount, device) = data_volume(&name, is_block(pvc), false);
    let mut volumes = vec![data];
    let mut mounts: Vec<VolumeMount> = mount.into_iter().collect();
    if let (Some(cm), None) = (&source.cert_config_map, &opts.clone) {
        volumes.push(Volume {
            name: "cdi-cert-vol".into(),
            config_map: Some(ConfigMapVolumeSource { name: cm.clone(), ..Default::default() }),
            ..Default::default()
        });
        mounts.push(VolumeMount { name: "cdi-cert-vol".into(), mount_path: CERT_DIR.into(), ..Default::default() });
    }
    let secret_headers = match &opts.clone {
        Some(c) => vec![c.header_secret.clone()],
        None => source.secret_extra_headers.clone(),
    };
    for (i, secret) in secret_headers.into_iter().enumerate() {
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
    let mut entries = env.to_env();
    if let (Some(disk), None) = (&source.ova_disk, &opts.clone) {
        entries.push(OvaDiskEnv(disk.clone()).to_env());
    }
    let mut container = worker_container(
        worker::IMPORTER,
        &cfg.importer_image,
        vec!["importer".into()],
        cfg,
        k8s_env(entries),
        mounts,
        device,
    );
    container.args = Some(vec![format!("-v={}", cfg.verbosity)]);
    Ok(worker_pod(pvc, cfg, naming::importer_pod(&name), worker::IMPORTER, container, volumes))
}

fn worker_pod(
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    name: String,
    worker: &str,
    container: Container,
    volumes: Vec<Volume>,
) -> Pod {
    let options = ClaimOptions::of(pvc.annotations());
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
            priority_class_name: options.priority_class,
            service_account_name: options.service_account,
            image_pull_secrets: (!cfg.image_pull_secrets.is_empty()).then(|| cfg.image_pull_secrets.clone()),
            node_selector: cfg.placement.as_ref().and_then(|p| p.node_selector.clone()),
            affinity: cfg.placement.as_ref().and_then(|p| p.affinity.clone()),
            tolerations: cfg.placement.as_ref().and_then(|p| p.tolerations.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The scratch PVC (`<pvc>-scratch`, always Filesystem, RWO). Its owner is the worker pod, known once created
/// ([`owned_by`]).
pub fn scratch_pvc(
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    target_overhead: f64,
    scratch_overhead: f64,
) -> Result<PersistentVolumeClaim, InvalidQuantity> {
    let req = image_size(pvc)?.map_or(MIB, |q| q.bytes());
    let usable = usable_space(if is_block(pvc) { 0.0 } else { target_overhead }, req);
    let size = required_space(scratch_overhead, usable).div_ceil(MIB) * MIB;
    let class = cfg.scratch_class.clone().or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()));
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(naming::scratch_pvc(&pvc.name_any())),
            namespace: pvc.namespace(),
            labels: Some(BTreeMap::from([
                (label::APP.to_owned(), label::APP_VALUE.to_owned()),
                (label::EXCLUDE_FROM_BACKUP.to_owned(), "true".to_owned()),
            ])),
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

/// `obj` with `owner` (a created worker pod) as its controller: deleted with it.
pub fn owned_by<K: Resource<DynamicType = ()>>(mut obj: K, owner: &Pod) -> K {
    obj.meta_mut().owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
    obj
}

/// Name of the Secret holding an upload server's TLS material (same as its pod and Service).
pub fn upload_tls_secret(pvc: &str) -> String {
    naming::upload_server(pvc)
}

/// The upload-server pod `cdi-upload-<pvc>` (contract in `uploader/README.md`).
pub fn upload_pod(
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    overhead: f64,
    deadline: &str,
) -> Result<Pod, InvalidQuantity> {
    let name = pvc.name_any();
    let block = is_block(pvc);
    let server = naming::upload_server(&name);
    let env = UploadServerEnv {
        image_size: image_size(pvc)?,
        tls_key_file: "/etc/tls/tls.key".into(),
        tls_cert_file: "/etc/tls/tls.crt".into(),
        client_cert_file: "/etc/tls/ca.crt".into(),
        client_name: consts::UPLOAD_CLIENT_NAME.into(),
        destination: if block { consts::BLOCK_DEVICE.to_owned() } else { format!("{}/disk.img", consts::DATA_DIR) },
        deadline: Some(deadline.to_owned()),
        listen_address: None,
        listen_port: consts::WORKER_PORT as u16,
        preallocation: preallocation(pvc, cfg),
        filesystem_overhead: if block { 0.0 } else { overhead },
        owner_uid: owner_uid(pvc),
    };
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
        worker::UPLOAD_SERVER,
        &cfg.uploadserver_image,
        vec!["uploadserver".into()],
        cfg,
        k8s_env(env.to_env()),
        mounts,
        device,
    );
    container.args = Some(vec![format!("-v={}", cfg.verbosity)]);
    container.readiness_probe = Some(healthz_probe(Some(2), 5));
    let mut pod = worker_pod(pvc, cfg, server.clone(), worker::UPLOAD_SERVER, container, vec![data, scratch, tls]);
    if let Some(l) = pod.metadata.labels.as_mut() {
        l.insert(label::UPLOAD_SERVER.into(), server);
        if let Some(uid) = pvc.uid() {
            l.insert(label::UPLOAD_TARGET.into(), uid);
        }
    }
    Ok(pod)
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
                (label::CDI.to_owned(), worker::UPLOAD_SERVER.to_owned()),
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
        worker::CLONE_SOURCE,
        &cfg.cloner_image,
        vec!["importer".into(), "serve".into()],
        cfg,
        k8s_env(
            CloneSourceEnv {
                path,
                token_file: format!("/clone-token/{CLONE_TOKEN_KEY}"),
                owner_uid: owner_uid(target),
            }
            .to_env(),
        ),
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
        worker::CLONE_SOURCE,
        container,
        vec![data, token],
    );
    pod.metadata.owner_references = None;
    pod.metadata.labels = Some(BTreeMap::from([
        (label::APP.to_owned(), label::APP_VALUE.to_owned()),
        (label::CDI.to_owned(), worker::CLONE_SOURCE.to_owned()),
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

/// A Secret `name` holding `value` under `key`, owned by `owner` (the clone token beside the clone-source pod,
/// or the target's `Authorization` header).
pub fn token_secret(name: &str, key: &str, value: String, owner: Option<Vec<OwnerReference>>) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), owner_references: owner, ..Default::default() },
        data: Some(BTreeMap::from([(key.to_owned(), ByteString(value.into_bytes()))])),
        ..Default::default()
    }
}

/// Name of the Secret (target namespace) holding the clone target's `Authorization` header.
pub fn clone_header_secret(pvc: &str) -> String {
    naming::resource_name(pvc, "clone-token")
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::cdi::TransferRequest;
    use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;

    fn claim(block: bool, size: Option<&str>, ann_: &[(&str, &str)]) -> PersistentVolumeClaim {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.name = Some("disk".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("pvc-uid".into());
        p.metadata.labels = Some(BTreeMap::from([("team".to_owned(), "x".to_owned())]));
        p.metadata.annotations = Some(ann_.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "cdi.kubevirt.io/v1beta1".into(),
            kind: "DataVolume".into(),
            name: "disk".into(),
            uid: "dv-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        p.spec = Some(PersistentVolumeClaimSpec {
            volume_mode: Some(if block { "Block" } else { "Filesystem" }.into()),
            storage_class_name: Some("local".into()),
            resources: size.map(|s| VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(s.to_owned()))])),
                limits: None,
            }),
            ..Default::default()
        });
        p.status = Some(PersistentVolumeClaimStatus { phase: Some("Bound".into()), ..Default::default() });
        p
    }

    fn config() -> WorkerConfig {
        WorkerConfig {
            importer_image: "reg/importer:1".into(),
            cloner_image: "reg/importer:1".into(),
            uploadserver_image: "reg/uploadserver:1".into(),
            pull_policy: "IfNotPresent".into(),
            verbosity: 1,
            insecure_registries: vec!["insecure.example:5000".into()],
            import_proxy: Some(ImportProxy { https_proxy: Some("http://proxy:3128".into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn source(pvc: &PersistentVolumeClaim) -> ImportSource {
        match TransferRequest::of(pvc.annotations()) {
            Some(TransferRequest::Import(s)) => s,
            other => panic!("not an import: {other:?}"),
        }
    }

    /// The container's environment as the pod would see it (secret references as `<secret>/<key>`).
    fn env_of(pod: &Pod) -> BTreeMap<String, String> {
        let c = &pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default()[0];
        c.env
            .iter()
            .flatten()
            .map(|e| {
                let v = e.value.clone().unwrap_or_else(|| {
                    let r = e.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref());
                    r.map(|r| format!("{}/{}", r.name, r.key)).unwrap_or_default()
                });
                (e.name.clone(), v)
            })
            .collect()
    }

    fn volumes(pod: &Pod) -> Vec<String> {
        pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).map(|v| v.name.clone()).collect()
    }

    fn mounts(pod: &Pod) -> Vec<(String, String)> {
        let c = &pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default()[0];
        c.volume_mounts.iter().flatten().map(|m| (m.name.clone(), m.mount_path.clone())).collect()
    }

    #[test]
    fn the_ova_disk_annotation_reaches_the_importer() {
        let ova = [(ann::SOURCE, "http"), (ann::ENDPOINT, "http://h/vm.ova"), (ann::OVA_DISK, "vmdisk2")];
        let pvc = claim(false, Some("1Gi"), &ova);
        let pod =
            importer_pod(&pvc, &source(&pvc), &config(), &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(env_of(&pod).get("IMPORTER_OVA_DISK").map(String::as_str), Some("vmdisk2"));
        let plain = claim(false, Some("1Gi"), &ova[..2]);
        let pod = importer_pod(&plain, &source(&plain), &config(), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!env_of(&pod).contains_key("IMPORTER_OVA_DISK"));
    }

    #[test]
    fn importer_pod_carries_cdis_contract() {
        let pvc = claim(
            false,
            Some("555745280"),
            &[
                (ann::SOURCE, "http"),
                (ann::ENDPOINT, "https://h/x.qcow2"),
                (ann::SECRET, "creds"),
                (ann::CERT_CONFIG_MAP, "ca"),
                (ann::CHECKSUM, "sha256:ab"),
                ("cdi.kubevirt.io/storage.import.extraHeaders.0", "X-A: 1"),
                ("cdi.kubevirt.io/storage.import.secretExtraHeaders.0", "hdr"),
                (ann::PRIORITY_CLASS, "high"),
                (ann::MULTUS_NETWORKS, "net1"),
            ],
        );
        let opts = ImportOptions { overhead: 0.06, direct_io: true, ..Default::default() };
        let pod = importer_pod(&pvc, &source(&pvc), &config(), &opts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pod.metadata.name.as_deref(), Some("importer-disk"));
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["app"], "containerized-data-importer");
        assert_eq!(labels[label::CDI], "importer");
        assert_eq!(labels[label::PROMETHEUS], "true");
        assert_eq!(labels["team"], "x", "the PVC's labels are copied");
        let a = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(a[ann::CREATED_BY_CONTROLLER], "yes");
        assert_eq!(a[ann::ISTIO_INJECT], "false");
        assert_eq!(a[ann::MULTUS_NETWORKS], "net1");
        let owner = &pod.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("PersistentVolumeClaim", "disk"));
        let env = env_of(&pod);
        for (k, v) in [
            ("IMPORTER_SOURCE", "http"),
            ("IMPORTER_ENDPOINT", "https://h/x.qcow2"),
            ("IMPORTER_CONTENTTYPE", "kubevirt"),
            ("IMPORTER_IMAGE_SIZE", "555745280"),
            ("OWNER_UID", "dv-uid"),
            ("FILESYSTEM_OVERHEAD", "0.06"),
            ("INSECURE_TLS", "false"),
            ("PREALLOCATION", "false"),
            ("CACHE_MODE", "TRYNONE"),
            ("IMPORTER_CHECKSUM", "sha256:ab"),
            ("IMPORTER_ACCESS_KEY_ID", "creds/accessKeyId"),
            ("IMPORTER_SECRET_KEY", "creds/secretKey"),
            ("IMPORTER_CERT_DIR", "/certs"),
            ("IMPORTER_EXTRA_HEADER_0", "X-A: 1"),
            ("https_proxy", "http://proxy:3128"),
        ] {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(volumes(&pod), ["cdi-data-vol", "cdi-cert-vol", "cdi-extra-headers-vol-0"]);
        assert_eq!(
            mounts(&pod),
            [
                ("cdi-data-vol".to_owned(), "/data".to_owned()),
                ("cdi-cert-vol".to_owned(), "/certs".to_owned()),
                ("cdi-extra-headers-vol-0".to_owned(), "/extraheaders/0".to_owned()),
            ]
        );
        let spec = pod.spec.clone().unwrap_or_default();
        assert_eq!(spec.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
        assert_eq!(spec.security_context.and_then(|s| s.fs_group), Some(107));
        let c = &spec.containers[0];
        assert_eq!(c.args, Some(vec!["-v=1".to_owned()]));
        assert_eq!(c.termination_message_policy.as_deref(), Some("FallbackToLogsOnError"));
        let sc = c.security_context.clone().unwrap_or_default();
        assert_eq!((sc.run_as_user, sc.allow_privilege_escalation), (Some(107), Some(false)));
        assert_eq!(
            c.ports.iter().flatten().map(|p| (p.name.as_deref(), p.container_port)).collect::<Vec<_>>(),
            [(Some("metrics"), 8443)]
        );
    }

    #[test]
    fn block_registry_and_clone_targets() {
        let reg = claim(
            true,
            Some("1Gi"),
            &[(ann::SOURCE, "registry"), (ann::ENDPOINT, "docker://insecure.example:5000/img:1")],
        );
        let opts = ImportOptions { overhead: 0.06, scratch: true, ..Default::default() };
        let pod = importer_pod(&reg, &source(&reg), &config(), &opts).unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod);
        assert_eq!(env["FILESYSTEM_OVERHEAD"], "0", "block volumes have no filesystem overhead");
        assert_eq!(env["INSECURE_TLS"], "true", "the registry is in CDIConfig's insecureRegistries");
        let c = &pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default()[0];
        let dev = c.volume_devices.clone().unwrap_or_default();
        assert_eq!(dev[0].device_path, "/dev/cdi-block-volume");
        assert_eq!(mounts(&pod), [("cdi-scratch-vol".to_owned(), "/scratch".to_owned())]);

        let target = claim(false, Some("1Gi"), &[(ann::CLONE_REQUEST, "src/golden"), (ann::CHECKSUM, "md5:00")]);
        let endpoint =
            CloneEndpoint { url: "https://10.0.0.9:8443/disk.img".into(), header_secret: clone_header_secret("disk") };
        let opts = ImportOptions { overhead: 0.06, clone: Some(endpoint), ..Default::default() };
        let src = ImportSource::new(SourceKind::Http, "https://10.0.0.9:8443/disk.img");
        let pod = importer_pod(&target, &src, &config(), &opts).unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&pod);
        assert_eq!(env["IMPORTER_ENDPOINT"], "https://10.0.0.9:8443/disk.img");
        assert_eq!(env["INSECURE_TLS"], "true");
        assert!(!env.contains_key("IMPORTER_CHECKSUM"));
        assert_eq!(volumes(&pod), ["cdi-data-vol", "cdi-extra-headers-vol-0"]);
    }

    #[test]
    fn scratch_claim_holds_a_fully_allocated_image() {
        let pvc = claim(false, Some("555745280"), &[]);
        let s = scratch_pvc(&pvc, &config(), 0.06, 0.06).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.metadata.name.as_deref(), Some("disk-scratch"));
        let spec = s.spec.clone().unwrap_or_default();
        // usable 500 MiB of the target, plus 6 % for the scratch filesystem (530 MiB), rounded up to a MiB.
        assert_eq!(spec.resources.and_then(|r| r.requests).unwrap_or_default()["storage"].0, "555745280");
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("local"));
        assert_eq!(s.metadata.labels.unwrap_or_default()[label::EXCLUDE_FROM_BACKUP], "true");
        let mut owner = Pod::default();
        owner.metadata.name = Some("importer-disk".into());
        owner.metadata.uid = Some("pod-uid".into());
        let owned = owned_by(scratch_pvc(&pvc, &config(), 0.06, 0.06).unwrap_or_else(|e| panic!("{e}")), &owner);
        assert_eq!(owned.metadata.owner_references.unwrap_or_default()[0].uid, "pod-uid");
        assert!(scratch_pvc(&claim(false, Some("lots"), &[]), &config(), 0.06, 0.06).is_err());
    }

    #[test]
    fn upload_server_pod_and_service() {
        let pvc = claim(true, Some("2Gi"), &[(ann::UPLOAD_TARGET, "")]);
        let pod = upload_pod(&pvc, &config(), 0.06, "2026-12-02T00:00:00Z").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pod.metadata.name.as_deref(), Some("cdi-upload-disk"));
        let env = env_of(&pod);
        for (k, v) in [
            ("UPLOAD_IMAGE_SIZE", "2Gi"),
            ("DESTINATION", "/dev/cdi-block-volume"),
            ("DEADLINE", "2026-12-02T00:00:00Z"),
            ("LISTEN_PORT", "8443"),
            ("CLIENT_NAME", "client.upload-server.cdi.kubevirt.io"),
            ("FILESYSTEM_OVERHEAD", "0"),
            ("OWNER_UID", "dv-uid"),
        ] {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels[label::UPLOAD_SERVER], "cdi-upload-disk");
        assert_eq!(labels[label::UPLOAD_TARGET], "pvc-uid");
        let c = &pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default()[0];
        let probe = c.readiness_probe.clone().unwrap_or_default();
        assert_eq!(probe.http_get.and_then(|g| g.scheme), Some("HTTPS".into()));
        assert_eq!(volumes(&pod), ["cdi-data-vol", "cdi-scratch-vol", "tls-config"]);

        let svc = upload_service(&pvc);
        let spec = svc.spec.unwrap_or_default();
        assert_eq!(spec.selector.unwrap_or_default()[label::UPLOAD_SERVER], "cdi-upload-disk");
        assert_eq!(spec.ports.unwrap_or_default()[0].port, 8443);
    }

    #[test]
    fn the_cdi_workloads_placement_reaches_every_worker_pod() {
        let placement: NodePlacement = serde_json::from_value(serde_json::json!({
            "nodeSelector": {"cdi-workers": "yes"},
            "tolerations": [{"key": "storage", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":
                [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let cfg = WorkerConfig { placement: Some(placement.clone()), ..config() };
        let pvc = claim(false, Some("1Gi"), &[(ann::SOURCE, "http"), (ann::ENDPOINT, "http://h/x.raw")]);
        let mut golden = claim(true, Some("1Gi"), &[]);
        golden.metadata.name = Some("golden".into());
        let pods = [
            importer_pod(&pvc, &source(&pvc), &cfg, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}")),
            upload_pod(&pvc, &cfg, 0.06, "2026-12-02T00:00:00Z").unwrap_or_else(|e| panic!("{e}")),
            clone_source_pod(&pvc, &golden, &cfg, "pvc-uid-source-pod"),
        ];
        for pod in pods {
            let spec = pod.spec.unwrap_or_default();
            assert_eq!(spec.node_selector, placement.node_selector, "{:?}", pod.metadata.name);
            assert_eq!(spec.tolerations, placement.tolerations, "{:?}", pod.metadata.name);
            assert_eq!(spec.affinity, placement.affinity, "{:?}", pod.metadata.name);
        }
        let plain =
            importer_pod(&pvc, &source(&pvc), &config(), &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let spec = plain.spec.unwrap_or_default();
        assert_eq!((spec.node_selector, spec.tolerations, spec.affinity), (None, None, None), "no placement");
    }

    #[test]
    fn clone_source_pod_serves_the_source_read_only() {
        let target = claim(false, Some("1Gi"), &[(ann::CLONE_REQUEST, "src/golden")]);
        let mut source = claim(true, Some("1Gi"), &[]);
        source.metadata.name = Some("golden".into());
        source.metadata.namespace = Some("src".into());
        let pod = clone_source_pod(&target, &source, &config(), "pvc-uid-source-pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("pvc-uid-source-pod"));
        assert_eq!(pod.metadata.owner_references, None, "pods in another namespace cannot be owned");
        assert_eq!(pod.metadata.annotations.clone().unwrap_or_default()[CLONE_TARGET_ANNOTATION], "ns/disk");
        let env = env_of(&pod);
        assert_eq!(env["SERVE_PATH"], "/dev/cdi-block-volume");
        assert_eq!(env["SERVE_TOKEN_FILE"], "/clone-token/token");
        assert_eq!(env["OWNER_UID"], "dv-uid");
        let spec = pod.spec.clone().unwrap_or_default();
        let data = spec.volumes.unwrap_or_default().into_iter().find(|v| v.name == "cdi-data-vol");
        assert_eq!(data.and_then(|v| v.persistent_volume_claim).and_then(|c| c.read_only), Some(true));
        let secret = token_secret("t", "token", "abc".into(), None);
        assert_eq!(secret.data.unwrap_or_default()["token"].0, b"abc");
    }
}
