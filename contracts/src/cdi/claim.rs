//! The PVC annotations that carry a transfer between CDI's controllers (`specs/cdi.md` §1.6), typed:
//!
//! * [`TransferRequest`] — what the claim asks for (import from a source, upload, clone), written by the
//!   DataVolume reconciler from `spec.source` and read by the transfer reconciler that runs the worker pods (and
//!   by the upload proxy and virtctl);
//! * [`ClaimOptions`] — the other inputs the workers honour (preallocation, pod placement, retention, binding);
//! * [`WorkerState`] — what the transfer reconciler observed of its worker pod (phase, readiness, restarts, the
//!   Running condition, scratch / direct-I/O / fatal flags), read by the DataVolume status, virtctl and the upload
//!   proxy; changed only through [`StateChanges`].
//!
//! Every key is parsed here once; nobody else compares annotation values as strings.

use std::collections::BTreeMap;

use super::ContentType;
use super::consts::ann;

/// PVC annotations as kube returns them.
pub type Annotations = BTreeMap<String, String>;

/// `storage.import.source`: where an import reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// `http`: an HTTP(S) URL (also the default when the annotation is absent).
    Http,
    /// `s3`: an S3 object.
    S3,
    /// `registry`: a container image (`docker://…`).
    Registry,
    /// `none`: a blank image.
    Blank,
    /// Any other value (`gcs`, `imageio`, …): passed to the importer, which refuses it with upstream's message.
    Unsupported(String),
}

impl SourceKind {
    /// Parses the annotation / `IMPORTER_SOURCE` value.
    pub fn parse(s: &str) -> SourceKind {
        match s {
            "http" => SourceKind::Http,
            "s3" => SourceKind::S3,
            "registry" => SourceKind::Registry,
            "none" => SourceKind::Blank,
            other => SourceKind::Unsupported(other.to_owned()),
        }
    }

    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            SourceKind::Http => "http",
            SourceKind::S3 => "s3",
            SourceKind::Registry => "registry",
            SourceKind::Blank => "none",
            SourceKind::Unsupported(s) => s,
        }
    }
}

/// The `storage.import.*` annotations of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportSource {
    /// `storage.import.source`.
    pub kind: SourceKind,
    /// `storage.import.endpoint` (empty when absent; blank images have none).
    pub endpoint: String,
    /// `storage.import.secretName`: Secret with `accessKeyId` / `secretKey`.
    pub secret: Option<String>,
    /// `storage.import.certConfigMap`: ConfigMap of CA certificates.
    pub cert_config_map: Option<String>,
    /// `storage.import.checksum` (`algo:hex`).
    pub checksum: Option<String>,
    /// `storage.import.insecureSkipVerify` = `"true"`.
    pub insecure_skip_verify: bool,
    /// `storage.import.extraHeaders.<n>`, in `n` order: complete header lines.
    pub extra_headers: Vec<String>,
    /// `storage.import.secretExtraHeaders.<n>`, in `n` order: Secrets whose files are header lines.
    pub secret_extra_headers: Vec<String>,
    /// `storage.import.registryImportMethod` (`pod`).
    pub registry_import_method: Option<String>,
    /// `storage.import.registryImageArchitecture`.
    pub registry_architecture: Option<String>,
    /// [`ann::OVA_DISK`]: the disk of an OVA source to import.
    pub ova_disk: Option<String>,
}

impl ImportSource {
    /// A source of `kind` at `endpoint`, without options.
    pub fn new(kind: SourceKind, endpoint: &str) -> ImportSource {
        ImportSource {
            kind,
            endpoint: endpoint.to_owned(),
            secret: None,
            cert_config_map: None,
            checksum: None,
            insecure_skip_verify: false,
            extra_headers: Vec::new(),
            secret_extra_headers: Vec::new(),
            registry_import_method: None,
            registry_architecture: None,
            ova_disk: None,
        }
    }

    fn of(a: &Annotations) -> ImportSource {
        let get = |k: &str| a.get(k).cloned();
        let non_empty = |k: &str| a.get(k).filter(|v| !v.is_empty()).cloned();
        ImportSource {
            kind: a.get(ann::SOURCE).map_or(SourceKind::Http, |s| SourceKind::parse(s)),
            endpoint: get(ann::ENDPOINT).unwrap_or_default(),
            secret: non_empty(ann::SECRET),
            cert_config_map: non_empty(ann::CERT_CONFIG_MAP),
            checksum: get(ann::CHECKSUM),
            insecure_skip_verify: a.get(ann::INSECURE_SKIP_VERIFY).is_some_and(|v| v == "true"),
            extra_headers: numbered(a, ann::EXTRA_HEADERS_PREFIX),
            secret_extra_headers: numbered(a, ann::SECRET_EXTRA_HEADERS_PREFIX),
            registry_import_method: get(ann::REGISTRY_IMPORT_METHOD),
            registry_architecture: get(ann::REGISTRY_ARCHITECTURE),
            ova_disk: non_empty(ann::OVA_DISK),
        }
    }

    fn write(&self, out: &mut Annotations) {
        let mut put = |k: &str, v: &str| {
            out.insert(k.to_owned(), v.to_owned());
        };
        put(ann::SOURCE, self.kind.as_str());
        if self.kind != SourceKind::Blank {
            put(ann::ENDPOINT, &self.endpoint);
        }
        if let Some(m) = &self.registry_import_method {
            put(ann::REGISTRY_IMPORT_METHOD, m);
        }
        for (k, v) in [(ann::SECRET, &self.secret), (ann::CERT_CONFIG_MAP, &self.cert_config_map)] {
            if let Some(v) = v {
                put(k, v);
            }
        }
        if let Some(c) = &self.checksum {
            put(ann::CHECKSUM, c);
        }
        if self.insecure_skip_verify {
            put(ann::INSECURE_SKIP_VERIFY, "true");
        }
        if let Some(arch) = &self.registry_architecture {
            put(ann::REGISTRY_ARCHITECTURE, arch);
        }
        if let Some(disk) = &self.ova_disk {
            put(ann::OVA_DISK, disk);
        }
        for (i, h) in self.extra_headers.iter().enumerate() {
            put(&format!("{}{i}", ann::EXTRA_HEADERS_PREFIX), h);
        }
        for (i, s) in self.secret_extra_headers.iter().enumerate() {
            put(&format!("{}{i}", ann::SECRET_EXTRA_HEADERS_PREFIX), s);
        }
    }
}

/// Values of `<prefix><n>` keys in `n` order (keys whose suffix is not a number sort last).
fn numbered(a: &Annotations, prefix: &str) -> Vec<String> {
    let mut v: Vec<(u32, &String)> =
        a.iter().filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.parse::<u32>().unwrap_or(u32::MAX), v))).collect();
    v.sort_by_key(|(n, _)| *n);
    v.into_iter().map(|(_, v)| v.clone()).collect()
}

/// What a claim asks CDI to do, read from (and written as) its annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferRequest {
    /// Import from a source (`storage.import.source` or `storage.import.endpoint` present); a blank image too.
    Import(ImportSource),
    /// Receive an upload (`storage.upload.target`).
    Upload,
    /// Host-assisted clone from another PVC (`k8s.io/CloneRequest: <namespace>/<name>`).
    Clone {
        /// Source namespace.
        namespace: String,
        /// Source PVC name.
        name: String,
    },
}

impl TransferRequest {
    /// Reads the request from a claim's annotations; `None` when the claim is not a CDI target.
    pub fn of(a: &Annotations) -> Option<TransferRequest> {
        if let Some(req) = a.get(ann::CLONE_REQUEST) {
            let (namespace, name) = req.split_once('/')?;
            return Some(TransferRequest::Clone { namespace: namespace.to_owned(), name: name.to_owned() });
        }
        if a.contains_key(ann::UPLOAD_TARGET) {
            return Some(TransferRequest::Upload);
        }
        (a.contains_key(ann::SOURCE) || a.contains_key(ann::ENDPOINT))
            .then(|| TransferRequest::Import(ImportSource::of(a)))
    }

    /// The annotations that carry this request.
    pub fn to_annotations(&self) -> Annotations {
        let mut out = Annotations::new();
        match self {
            TransferRequest::Import(s) => s.write(&mut out),
            TransferRequest::Upload => {
                out.insert(ann::UPLOAD_TARGET.to_owned(), String::new());
            }
            TransferRequest::Clone { namespace, name } => {
                out.insert(ann::CLONE_REQUEST.to_owned(), format!("{namespace}/{name}"));
            }
        }
        out
    }
}

/// The other claim inputs the workers honour (written from the DataVolume, read by the transfer reconciler).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimOptions {
    /// `storage.contentType` (default `kubevirt`).
    pub content_type: ContentType,
    /// `storage.preallocation.requested` (absent: the CDIConfig default).
    pub preallocation: Option<bool>,
    /// `storage.pod.priorityclassname` of worker pods.
    pub priority_class: Option<String>,
    /// `storage.pod.serviceAccountName` of worker pods.
    pub service_account: Option<String>,
    /// `storage.pod.retainAfterCompletion` = `"true"`: finished worker pods are kept.
    pub retain_after_completion: bool,
    /// `storage.bind.immediate.requested` present: WaitForFirstConsumer is ignored.
    pub bind_immediate: bool,
    /// `storage.usePopulator` = `"true"`: the DataVolume is filled through a populator claim (PVC′).
    pub use_populator: bool,
    /// `storage.populator.pvcPrime`: the populator's PVC′, once known.
    pub pvc_prime: Option<String>,
}

impl ClaimOptions {
    /// Reads the options from a claim's annotations.
    pub fn of(a: &Annotations) -> ClaimOptions {
        ClaimOptions {
            content_type: match a.get(ann::CONTENT_TYPE).map(String::as_str) {
                Some("archive") => ContentType::Archive,
                _ => ContentType::Kubevirt,
            },
            preallocation: a.get(ann::PREALLOCATION_REQUESTED).map(|v| v == "true"),
            priority_class: a.get(ann::PRIORITY_CLASS).cloned(),
            service_account: a.get(ann::SERVICE_ACCOUNT).cloned(),
            retain_after_completion: a.get(ann::RETAIN_AFTER_COMPLETION).is_some_and(|v| v == "true"),
            bind_immediate: a.contains_key(ann::BIND_IMMEDIATE),
            use_populator: a.get(ann::USE_POPULATOR).is_some_and(|v| v == "true"),
            pvc_prime: a.get(ann::POPULATOR_PVC_PRIME).cloned(),
        }
    }
}

/// `storage.pod.phase`: the worker pod's phase as last observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPhase {
    /// Created, not running yet.
    Pending,
    /// Running.
    Running,
    /// Finished successfully (the transfer is done).
    Succeeded,
    /// Failed (fatal when [`WorkerState::fatal_error`] is set; otherwise the pod restarts).
    Failed,
    /// Any other value (Kubernetes' `Unknown`).
    Unknown,
}

impl WorkerPhase {
    /// Parses a pod phase / annotation value.
    pub fn parse(s: &str) -> WorkerPhase {
        match s {
            "Pending" => WorkerPhase::Pending,
            "Running" => WorkerPhase::Running,
            "Succeeded" => WorkerPhase::Succeeded,
            "Failed" => WorkerPhase::Failed,
            _ => WorkerPhase::Unknown,
        }
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerPhase::Pending => "Pending",
            WorkerPhase::Running => "Running",
            WorkerPhase::Succeeded => "Succeeded",
            WorkerPhase::Failed => "Failed",
            WorkerPhase::Unknown => "Unknown",
        }
    }
}

/// The Running condition the transfer reconciler publishes for the DataVolume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningCondition {
    /// `storage.condition.running` = `"true"`.
    pub running: bool,
    /// `storage.condition.running.reason`.
    pub reason: String,
    /// `storage.condition.running.message`.
    pub message: String,
}

/// An override of the Bound condition (`storage.condition.bound` = `"false"` with a reason and message).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoundOverride {
    /// `storage.condition.bound.reason`.
    pub reason: String,
    /// `storage.condition.bound.message`.
    pub message: String,
}

/// The worker state a claim carries, parsed from its annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerState {
    /// `storage.pod.phase`.
    pub phase: Option<WorkerPhase>,
    /// `storage.pod.ready` is `true` (any case) or `1` (upload servers).
    pub ready: bool,
    /// `storage.pod.restarts` (0 when absent or malformed).
    pub restarts: i32,
    /// The Running condition, when published.
    pub running: Option<RunningCondition>,
    /// The Bound condition override, when set.
    pub bound_override: Option<BoundOverride>,
    /// `storage.import.requiresScratch` = `"true"`.
    pub requires_scratch: bool,
    /// `storage.import.requiresDirectIo` = `"true"` (the last pod was OOM-killed).
    pub requires_direct_io: bool,
    /// `storage.import.fatalError` = `"true"` (checksum mismatch: never retried).
    pub fatal_error: bool,
}

impl WorkerState {
    /// Reads the state from a claim's annotations.
    pub fn of(a: &Annotations) -> WorkerState {
        let is_true = |k: &str| a.get(k).is_some_and(|v| v == "true");
        let text = |k: &str| a.get(k).cloned().unwrap_or_default();
        WorkerState {
            phase: a.get(ann::POD_PHASE).map(|p| WorkerPhase::parse(p)),
            ready: a.get(ann::POD_READY).is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
            restarts: a.get(ann::POD_RESTARTS).and_then(|v| v.parse().ok()).unwrap_or(0),
            running: a.contains_key(ann::RUNNING_CONDITION).then(|| RunningCondition {
                running: is_true(ann::RUNNING_CONDITION),
                reason: text(ann::RUNNING_CONDITION_REASON),
                message: text(ann::RUNNING_CONDITION_MESSAGE),
            }),
            bound_override: a.get(ann::BOUND_CONDITION).filter(|v| *v == "false").map(|_| BoundOverride {
                reason: text(ann::BOUND_CONDITION_REASON),
                message: text(ann::BOUND_CONDITION_MESSAGE),
            }),
            requires_scratch: is_true(ann::REQUIRES_SCRATCH),
            requires_direct_io: is_true(ann::REQUIRES_DIRECT_IO),
            fatal_error: is_true(ann::FATAL_ERROR),
        }
    }

    /// The transfer is over for good: it succeeded or failed fatally.
    pub fn is_done(&self) -> bool {
        self.phase == Some(WorkerPhase::Succeeded) || self.fatal_error
    }
}

/// Changes to a claim's worker-state annotations: `Some(v)` sets a key, `None` removes it. Built through typed
/// setters, so every key is spelled here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateChanges(BTreeMap<String, Option<String>>);

impl StateChanges {
    fn set(&mut self, key: &str, value: Option<String>) -> &mut Self {
        self.0.insert(key.to_owned(), value);
        self
    }

    /// Sets (`Some`) or removes (`None`) `storage.pod.phase`.
    pub fn phase(&mut self, phase: Option<WorkerPhase>) -> &mut Self {
        self.set(ann::POD_PHASE, phase.map(|p| p.as_str().to_owned()))
    }

    /// Sets `storage.pod.ready`.
    pub fn ready(&mut self, ready: bool) -> &mut Self {
        self.set(ann::POD_READY, Some(ready.to_string()))
    }

    /// Sets `storage.pod.restarts`.
    pub fn restarts(&mut self, restarts: i32) -> &mut Self {
        self.set(ann::POD_RESTARTS, Some(restarts.to_string()))
    }

    /// Publishes the Running condition (all three keys).
    pub fn running(&mut self, running: bool, reason: &str, message: &str) -> &mut Self {
        self.set(ann::RUNNING_CONDITION, Some(running.to_string()));
        self.set(ann::RUNNING_CONDITION_REASON, Some(reason.to_owned()));
        self.set(ann::RUNNING_CONDITION_MESSAGE, Some(message.to_owned()))
    }

    /// Marks that the next worker needs a scratch volume.
    pub fn requires_scratch(&mut self) -> &mut Self {
        self.set(ann::REQUIRES_SCRATCH, Some("true".into()))
    }

    /// Marks that the next worker must use direct I/O (the last one was OOM-killed).
    pub fn requires_direct_io(&mut self) -> &mut Self {
        self.set(ann::REQUIRES_DIRECT_IO, Some("true".into()))
    }

    /// Marks the transfer as failed for good.
    pub fn fatal_error(&mut self) -> &mut Self {
        self.set(ann::FATAL_ERROR, Some("true".into()))
    }

    /// Records that the worker preallocated the target (`storage.preallocation`).
    pub fn preallocation_applied(&mut self) -> &mut Self {
        self.set(ann::PREALLOCATION_APPLIED, Some("true".into()))
    }

    /// Records the importer pod's name.
    pub fn import_pod_name(&mut self, name: &str) -> &mut Self {
        self.set(ann::IMPORT_POD_NAME, Some(name.to_owned()))
    }

    /// Records the clone-source pod's name and the clone type (`copy`).
    pub fn clone_source(&mut self, pod: &str) -> &mut Self {
        self.set(ann::SOURCE_CLONE_POD_NAME, Some(pod.to_owned()));
        self.set(ann::CLONE_TYPE, Some("copy".into()))
    }

    /// Sets the phase to `Pending` unless `current` has a phase already (a fresh worker pod).
    pub fn pending_unless(&mut self, current: &Annotations) -> &mut Self {
        if !current.contains_key(ann::POD_PHASE) {
            self.phase(Some(WorkerPhase::Pending));
        }
        self
    }

    /// The value this change gives `key`, if it touches it (`Some(None)`: removed).
    pub fn get(&self, key: &str) -> Option<Option<&str>> {
        self.0.get(key).map(|v| v.as_deref())
    }

    /// Drops the changes `current` already has in place.
    pub fn without_unchanged(mut self, current: &Annotations) -> StateChanges {
        self.0.retain(|k, v| current.get(k) != v.as_ref());
        self
    }

    /// No change at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The changes as a merge-patch `annotations` map (`null` removes).
    pub fn as_map(&self) -> &BTreeMap<String, Option<String>> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> Annotations {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn requests_round_trip_through_annotations() {
        let mut http = ImportSource::new(SourceKind::Http, "https://h/x.qcow2");
        http.secret = Some("creds".into());
        http.checksum = Some("sha256:ab".into());
        http.insecure_skip_verify = true;
        http.extra_headers = vec!["X-A: 1".into(), "X-B: 2".into()];
        http.secret_extra_headers = vec!["hdr".into()];
        let mut registry = ImportSource::new(SourceKind::Registry, "docker://r/i");
        registry.registry_import_method = Some("pod".into());
        let clone = TransferRequest::Clone { namespace: "ns".into(), name: "golden".into() };
        for (req, want) in [
            (
                TransferRequest::Import(http),
                &[
                    (ann::SOURCE, "http"),
                    (ann::ENDPOINT, "https://h/x.qcow2"),
                    (ann::SECRET, "creds"),
                    (ann::CHECKSUM, "sha256:ab"),
                    (ann::INSECURE_SKIP_VERIFY, "true"),
                    ("cdi.kubevirt.io/storage.import.extraHeaders.0", "X-A: 1"),
                    ("cdi.kubevirt.io/storage.import.extraHeaders.1", "X-B: 2"),
                    ("cdi.kubevirt.io/storage.import.secretExtraHeaders.0", "hdr"),
                ][..],
            ),
            (
                TransferRequest::Import(registry),
                &[(ann::SOURCE, "registry"), (ann::ENDPOINT, "docker://r/i"), (ann::REGISTRY_IMPORT_METHOD, "pod")][..],
            ),
            (clone, &[(ann::CLONE_REQUEST, "ns/golden")][..]),
            (TransferRequest::Upload, &[(ann::UPLOAD_TARGET, "")][..]),
        ] {
            let a = req.to_annotations();
            assert_eq!(a, annotations(want));
            assert_eq!(TransferRequest::of(&a), Some(req));
        }
        let blank = TransferRequest::Import(ImportSource::new(SourceKind::Blank, ""));
        assert_eq!(blank.to_annotations(), annotations(&[(ann::SOURCE, "none")]));
    }

    #[test]
    fn reading_requests_from_hand_written_claims() {
        assert_eq!(TransferRequest::of(&annotations(&[])), None);
        assert_eq!(TransferRequest::of(&annotations(&[(ann::CLONE_REQUEST, "no-slash")])), None);
        assert_eq!(TransferRequest::of(&annotations(&[(ann::UPLOAD_TARGET, "")])), Some(TransferRequest::Upload));
        let Some(TransferRequest::Import(s)) = TransferRequest::of(&annotations(&[
            (ann::ENDPOINT, "http://h/x"),
            ("cdi.kubevirt.io/storage.import.extraHeaders.10", "X-C: 3"),
            ("cdi.kubevirt.io/storage.import.extraHeaders.2", "X-B: 2"),
            ("cdi.kubevirt.io/storage.import.extraHeaders.x", "X-Z: 9"),
            (ann::SECRET, ""),
        ])) else {
            panic!("not an import")
        };
        assert_eq!(s.kind, SourceKind::Http, "no source annotation means http");
        assert_eq!(s.extra_headers, ["X-B: 2", "X-C: 3", "X-Z: 9"]);
        assert_eq!(s.secret, None, "an empty secret name is no secret");
        let Some(TransferRequest::Import(g)) = TransferRequest::of(&annotations(&[(ann::SOURCE, "gcs")])) else {
            panic!("not an import")
        };
        assert_eq!(g.kind, SourceKind::Unsupported("gcs".into()));
    }

    #[test]
    fn worker_state_is_parsed_once_and_changed_by_key() {
        let a = annotations(&[
            (ann::POD_PHASE, "Running"),
            (ann::POD_RESTARTS, "2"),
            (ann::RUNNING_CONDITION, "false"),
            (ann::RUNNING_CONDITION_REASON, "Error"),
            (ann::BOUND_CONDITION, "false"),
            (ann::BOUND_CONDITION_REASON, "CreatingScratchSpace"),
            (ann::FATAL_ERROR, "yes"),
        ]);
        let s = WorkerState::of(&a);
        assert_eq!(s.phase, Some(WorkerPhase::Running));
        assert_eq!(s.restarts, 2);
        assert_eq!(
            s.running,
            Some(RunningCondition { running: false, reason: "Error".into(), message: String::new() })
        );
        assert_eq!(s.bound_override.as_ref().map(|b| b.reason.clone()), Some("CreatingScratchSpace".into()));
        assert!(!s.fatal_error && !s.is_done(), "only \"true\" sets a flag");
        assert_eq!(WorkerState::of(&annotations(&[(ann::POD_RESTARTS, "x")])).restarts, 0);
        assert_eq!(WorkerState::of(&annotations(&[(ann::POD_PHASE, "Lost")])).phase, Some(WorkerPhase::Unknown));

        let mut c = StateChanges::default();
        c.phase(Some(WorkerPhase::Running)).restarts(3).running(false, "Error", "");
        let c = c.without_unchanged(&a);
        assert_eq!(c.get(ann::POD_PHASE), None, "already in place");
        assert_eq!(c.get(ann::POD_RESTARTS), Some(Some("3")));
        assert_eq!(c.get(ann::RUNNING_CONDITION_MESSAGE), Some(Some("")));
        let mut d = StateChanges::default();
        d.phase(None).pending_unless(&a);
        assert_eq!(d.get(ann::POD_PHASE), Some(None));
    }
}
