//! CDI's exact wire constants: annotation keys, labels, condition reasons, event reasons and messages, metric
//! names. Everything here is compared byte for byte by upstream tooling (KubeVirt, UIs, virtctl), so the values
//! are copied from the contract (`specs/cdi.md` §1.5, §1.6, §2) and never computed.

/// API group of CDI's resources.
pub const GROUP: &str = "cdi.kubevirt.io";

/// The upload token API (`cdi-apiserver`, an aggregated API): virtctl asks it for a token bound to a PVC.
pub mod upload_token {
    /// API group.
    pub const GROUP: &str = "upload.cdi.kubevirt.io";
    /// API version.
    pub const VERSION: &str = "v1beta1";
    /// Kind.
    pub const KIND: &str = "UploadTokenRequest";
    /// Resource (plural).
    pub const RESOURCE: &str = "uploadtokenrequests";
}

/// PVC and pod annotation keys (`cdi.kubevirt.io/…`).
pub mod ann {
    /// Import source kind (`http`, `s3`, `registry`, `none`, …).
    pub const SOURCE: &str = "cdi.kubevirt.io/storage.import.source";
    /// Import endpoint URL.
    pub const ENDPOINT: &str = "cdi.kubevirt.io/storage.import.endpoint";
    /// Name of the credentials Secret (`accessKeyId`, `secretKey`).
    pub const SECRET: &str = "cdi.kubevirt.io/storage.import.secretName";
    /// Name of the CA ConfigMap.
    pub const CERT_CONFIG_MAP: &str = "cdi.kubevirt.io/storage.import.certConfigMap";
    /// Expected checksum `algo:hex`.
    pub const CHECKSUM: &str = "cdi.kubevirt.io/storage.import.checksum";
    /// `"true"` to skip TLS verification.
    pub const INSECURE_SKIP_VERIFY: &str = "cdi.kubevirt.io/storage.import.insecureSkipVerify";
    /// Prefix of `extraHeaders.<i>`.
    pub const EXTRA_HEADERS_PREFIX: &str = "cdi.kubevirt.io/storage.import.extraHeaders.";
    /// Prefix of `secretExtraHeaders.<i>`.
    pub const SECRET_EXTRA_HEADERS_PREFIX: &str = "cdi.kubevirt.io/storage.import.secretExtraHeaders.";
    /// Registry pull method (`pod`/`node`).
    pub const REGISTRY_IMPORT_METHOD: &str = "cdi.kubevirt.io/storage.import.registryImportMethod";
    /// Registry platform architecture.
    pub const REGISTRY_ARCHITECTURE: &str = "cdi.kubevirt.io/storage.import.registryImageArchitecture";
    /// Our extension (CDI imports no OVAs): which disk of an OVA source to import — its `ovf:diskId`, file name
    /// or file id. Set on the DataVolume, copied to the PVC like every DataVolume annotation, handed to the
    /// importer as `IMPORTER_OVA_DISK`. Without it the OVF's first disk is imported.
    pub const OVA_DISK: &str = "import.kubevirt-rs.io/ova-disk";
    /// Content type (`kubevirt`/`archive`).
    pub const CONTENT_TYPE: &str = "cdi.kubevirt.io/storage.contentType";
    /// Preallocation requested.
    pub const PREALLOCATION_REQUESTED: &str = "cdi.kubevirt.io/storage.preallocation.requested";
    /// Preallocation applied (from the termination message).
    pub const PREALLOCATION_APPLIED: &str = "cdi.kubevirt.io/storage.preallocation";
    /// Worker pod priority class.
    pub const PRIORITY_CLASS: &str = "cdi.kubevirt.io/storage.pod.priorityclassname";
    /// Worker pod service account.
    pub const SERVICE_ACCOUNT: &str = "cdi.kubevirt.io/storage.pod.serviceAccountName";
    /// `"true"` keeps worker pods after completion.
    pub const RETAIN_AFTER_COMPLETION: &str = "cdi.kubevirt.io/storage.pod.retainAfterCompletion";
    /// Ignore WaitForFirstConsumer and bind at once.
    pub const BIND_IMMEDIATE: &str = "cdi.kubevirt.io/storage.bind.immediate.requested";
    /// Marks an upload target PVC.
    pub const UPLOAD_TARGET: &str = "cdi.kubevirt.io/storage.upload.target";
    /// Populator flow switch.
    pub const USE_POPULATOR: &str = "cdi.kubevirt.io/storage.usePopulator";
    /// Populator PVC′ name.
    pub const POPULATOR_PVC_PRIME: &str = "cdi.kubevirt.io/storage.populator.pvcPrime";
    /// Name of the importer pod.
    pub const IMPORT_POD_NAME: &str = "cdi.kubevirt.io/storage.import.importPodName";
    /// Worker pod phase (`Pending`/`Running`/`Succeeded`/`Failed`).
    pub const POD_PHASE: &str = "cdi.kubevirt.io/storage.pod.phase";
    /// Upload pod readiness (`"true"`/`"false"`).
    pub const POD_READY: &str = "cdi.kubevirt.io/storage.pod.ready";
    /// Restart count of the worker pod's first container.
    pub const POD_RESTARTS: &str = "cdi.kubevirt.io/storage.pod.restarts";
    /// Running condition status.
    pub const RUNNING_CONDITION: &str = "cdi.kubevirt.io/storage.condition.running";
    /// Running condition reason.
    pub const RUNNING_CONDITION_REASON: &str = "cdi.kubevirt.io/storage.condition.running.reason";
    /// Running condition message.
    pub const RUNNING_CONDITION_MESSAGE: &str = "cdi.kubevirt.io/storage.condition.running.message";
    /// Bound condition override status.
    pub const BOUND_CONDITION: &str = "cdi.kubevirt.io/storage.condition.bound";
    /// Bound condition override reason.
    pub const BOUND_CONDITION_REASON: &str = "cdi.kubevirt.io/storage.condition.bound.reason";
    /// Bound condition override message.
    pub const BOUND_CONDITION_MESSAGE: &str = "cdi.kubevirt.io/storage.condition.bound.message";
    /// The importer needs a scratch volume.
    pub const REQUIRES_SCRATCH: &str = "cdi.kubevirt.io/storage.import.requiresScratch";
    /// The importer was OOM-killed: use direct I/O next time.
    pub const REQUIRES_DIRECT_IO: &str = "cdi.kubevirt.io/storage.import.requiresDirectIo";
    /// A fatal (non-retryable) import error happened (checksum mismatch).
    pub const FATAL_ERROR: &str = "cdi.kubevirt.io/storage.import.fatalError";
    /// On worker pods: made by a CDI controller.
    pub const CREATED_BY_CONTROLLER: &str = "cdi.kubevirt.io/storage.createdByController";
    /// UID of the DataVolume a PVC was made for.
    pub const CREATED_FOR_DATAVOLUME: &str = "cdi.kubevirt.io/createdForDataVolume";
    /// Name of the clone-source pod.
    pub const SOURCE_CLONE_POD_NAME: &str = "cdi.kubevirt.io/storage.sourceClonePodName";
    /// What kind of clone was done (`copy`).
    pub const CLONE_TYPE: &str = "cdi.kubevirt.io/cloneType";
    /// Clone request `<namespace>/<name>` of the source PVC.
    pub const CLONE_REQUEST: &str = "k8s.io/CloneRequest";
    /// Set on the target when the clone finished.
    pub const CLONE_OF: &str = "k8s.io/CloneOf";
    /// Node the scheduler picked for a WaitForFirstConsumer claim.
    pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
    /// Provisioner a claim was handed to.
    pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
    /// Marks the default virtualisation storage class.
    pub const DEFAULT_VIRT_CLASS: &str = "storageclass.kubevirt.io/is-default-virt-class";
    /// Marks the Kubernetes default storage class.
    pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
    /// Multus networks, passed to worker pods.
    pub const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
    /// Multus default network, passed to worker pods.
    pub const MULTUS_DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";
    /// Istio sidecar injection (default `"false"` on worker pods).
    pub const ISTIO_INJECT: &str = "sidecar.istio.io/inject";
    /// Linkerd injection (default `"disabled"` on worker pods).
    pub const LINKERD_INJECT: &str = "linkerd.io/inject";
}

/// Label keys and values.
pub mod label {
    /// `app` label key.
    pub const APP: &str = "app";
    /// `app` value on every CDI-made object.
    pub const APP_VALUE: &str = "containerized-data-importer";
    /// Worker kind label (`importer`, `cdi-upload-server`, `cdi-clone-source`: [`worker`]).
    pub const CDI: &str = "cdi.kubevirt.io";
    /// The kinds of worker: the value of their [`CDI`] label, and their container's name.
    pub mod worker {
        /// An importer pod.
        pub const IMPORTER: &str = "importer";
        /// An upload-server pod.
        pub const UPLOAD_SERVER: &str = "cdi-upload-server";
        /// A clone-source pod.
        pub const CLONE_SOURCE: &str = "cdi-clone-source";
    }
    /// Prometheus scrape marker.
    pub const PROMETHEUS: &str = "prometheus.cdi.kubevirt.io";
    /// Disables the PV-filling alert on Filesystem PVCs.
    pub const FILLING_UP_ALERT: &str = "alerts.k8s.io/KubePersistentVolumeFillingUp";
    /// Scratch PVCs are not backed up.
    pub const EXCLUDE_FROM_BACKUP: &str = "velero.io/exclude-from-backup";
    /// Upload-server pods are selected by their Service through this label.
    pub const UPLOAD_SERVER: &str = "cdi.kubevirt.io/uploadServer";
    /// Upload-target pods carry the target PVC UID (clone source affinity).
    pub const UPLOAD_TARGET: &str = "cdi.kubevirt.io/uploadTarget";
    /// Recommended labels that CDI copies onto worker pods.
    pub const APP_KUBERNETES_IO: [&str; 4] = [
        "app.kubernetes.io/component",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/part-of",
        "app.kubernetes.io/version",
    ];
}

/// Condition reasons and literal messages.
pub mod reason {
    /// Bound/True.
    pub const BOUND: &str = "Bound";
    /// Bound/False while the claim is pending.
    pub const PENDING: &str = "Pending";
    /// Bound/False after the claim was lost.
    pub const CLAIM_LOST: &str = "ClaimLost";
    /// Bound/False when the PVC does not exist.
    pub const NOT_FOUND: &str = "NotFound";
    /// Running/True (literally "Pod is running").
    pub const POD_RUNNING: &str = "Pod is running";
    /// Running/False after success (the container's terminated reason).
    pub const COMPLETED: &str = "Completed";
    /// Running/False after a failure.
    pub const ERROR: &str = "Error";
    /// Running/False after a checksum mismatch.
    pub const CHECKSUM_ERROR: &str = "ChecksumError";
    /// Running/False when the image cannot be pulled.
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    /// Running/False when scratch space is needed.
    pub const SCRATCH_REQUIRED: &str = "Scratch space required";
    /// Running/False when the pod cannot be scheduled.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// Ready/False while the transfer runs.
    pub const TRANSFER_RUNNING: &str = "TransferRunning";
    /// Bound override while the scratch PVC is created.
    pub const CREATING_SCRATCH: &str = "CreatingScratchSpace";
    /// DV-level error: the claim spec is invalid.
    pub const ERR_CLAIM_NOT_VALID: &str = "ErrClaimNotValid";
    /// DV-level error: quota exceeded.
    pub const ERR_EXCEEDED_QUOTA: &str = "ErrExceededQuota";
}

/// Event reasons (on DataVolumes and PVCs).
pub mod event {
    /// "Import into %s scheduled".
    pub const IMPORT_SCHEDULED: &str = "ImportScheduled";
    /// "Import into %s in progress".
    pub const IMPORT_IN_PROGRESS: &str = "ImportInProgress";
    /// "Failed to import into PVC %s".
    pub const IMPORT_FAILED: &str = "ImportFailed";
    /// "Successfully imported into PVC %s".
    pub const IMPORT_SUCCEEDED: &str = "ImportSucceeded";
    /// "Upload into %s scheduled".
    pub const UPLOAD_SCHEDULED: &str = "UploadScheduled";
    /// "Upload into %s ready".
    pub const UPLOAD_READY: &str = "UploadReady";
    /// Upload failed.
    pub const UPLOAD_FAILED: &str = "UploadFailed";
    /// "Successfully uploaded into %s".
    pub const UPLOAD_SUCCEEDED: &str = "UploadSucceeded";
    /// Clone scheduled.
    pub const CLONE_SCHEDULED: &str = "CloneScheduled";
    /// Clone in progress.
    pub const CLONE_IN_PROGRESS: &str = "CloneInProgress";
    /// Clone succeeded.
    pub const CLONE_SUCCEEDED: &str = "CloneSucceeded";
    /// Clone failed.
    pub const CLONE_FAILED: &str = "CloneFailed";
    /// "PVC %s lost".
    pub const ERR_CLAIM_LOST: &str = "ErrClaimLost";
    /// Bound condition changed to True.
    pub const BOUND: &str = "Bound";
    /// Bound condition pending.
    pub const PENDING: &str = "Pending";
    /// Warning on the PVC with the termination message.
    pub const ERR_IMPORT_FAILED: &str = "ErrImportFailed";
    /// PVC event "Import Successful".
    pub const IMPORT_SUCCEEDED_PVC: &str = "ImportSucceeded";
    /// PVC event "Upload Successful".
    pub const UPLOAD_SUCCEEDED_PVC: &str = "UploadSucceeded";
}

/// Messages compared literally by upstream tooling.
pub mod message {
    /// Importer success.
    pub const IMPORT_COMPLETE: &str = "Import Complete";
    /// Upload success.
    pub const UPLOAD_COMPLETE: &str = "Upload Complete";
    /// Clone success.
    pub const CLONE_COMPLETE: &str = "Clone Complete";
    /// Simplified message for every "volume too small" failure.
    pub const TOO_SMALL: &str = "DataVolume too small to contain image";
    /// Substrings that are simplified to [`TOO_SMALL`].
    pub const TOO_SMALL_MARKERS: [&str; 4] = [
        "is larger than the reported available",
        "no space left on device",
        "file largest block is bigger than maxblock",
        "disk quota exceeded",
    ];
    /// Legacy plain success messages containing this set the preallocation annotation.
    pub const PREALLOCATION_APPLIED: &str = "Preallocation applied";
    /// Substring of the termination message that makes a failure fatal.
    pub const CHECKSUM_MISMATCH: &str = "checksum mismatch";
    /// Running/False message of an unschedulable pod.
    pub const IMPORTER_UNSCHEDULABLE: &str = "Importer pod cannot be scheduled";
    /// Running/False message when scratch is needed.
    pub const SCRATCH_REQUIRED: &str = "scratch space required and none found";
    /// Bound override message while the scratch PVC is made.
    pub const CREATING_SCRATCH: &str = "Creating scratch space";
    /// Bound/False message when the PVC is missing.
    pub const NO_PVC: &str = "No PVC found";
    /// Bound/False message after loss.
    pub const CLAIM_LOST: &str = "Claim Lost";
}

/// Progress metric names the controller scrapes (the line must carry exactly the `ownerUID` label).
pub const PROGRESS_METRICS: [&str; 3] =
    ["kubevirt_cdi_import_progress_total", "kubevirt_cdi_clone_progress_total", "kubevirt_cdi_upload_progress_total"];

/// Name of the importer/upload container port that serves metrics.
pub const METRICS_PORT_NAME: &str = "metrics";

/// Container port of the importer's metrics and of the upload server.
pub const WORKER_PORT: i32 = 8443;

/// UID and GID that worker containers run as.
pub const WORKER_UID: i64 = 107;

/// Mount point of a Filesystem target volume.
pub const DATA_DIR: &str = "/data";
/// Device path of a Block target volume.
pub const BLOCK_DEVICE: &str = "/dev/cdi-block-volume";
/// Mount point of the scratch volume.
pub const SCRATCH_DIR: &str = "/scratch";
/// Name of the target volume in worker pods.
pub const DATA_VOLUME_NAME: &str = "cdi-data-vol";
/// Name of the scratch volume in worker pods.
pub const SCRATCH_VOLUME_NAME: &str = "cdi-scratch-vol";
/// Default filesystem overhead (`CDIConfig` global default).
pub const DEFAULT_FS_OVERHEAD: &str = "0.06";
/// Common name of the upload proxy's client certificate.
pub const UPLOAD_CLIENT_NAME: &str = "client.upload-server.cdi.kubevirt.io";
