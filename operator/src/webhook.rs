//! Upstream's uninstall guards, served by every operator replica: the `ValidatingWebhookConfiguration`
//! `virt-operator-validator` refuses deleting the `KubeVirt` object while VMIs, VMs or VMI replica sets exist when
//! its `uninstallStrategy` is `BlockUninstallIfWorkloadsExist` (webhook `kubevirt-validator.kubevirt.io`,
//! failure policy `Fail`), and deleting the `CDI` object while DataVolumes exist under the same strategy
//! (`cdi-validate.cdi.kubevirt.io`, failure policy `Ignore`), with upstream's messages. Without the strategy (the
//! default, `RemoveWorkloads`) or before the installation was deployed, deleting is allowed.
//!
//! The serving certificate is the operator's own ([`CERT_SECRET`], a CA and a leaf for the webhook Service, made
//! by the first replica to start and renewed at start when less than [`RENEW_BEFORE`] is left).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use crds::cdi::{CDI, DataVolume};
use crds::kubevirt::config::KubeVirt;
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::{Value, json};

use crate::pki::{self, Ca, Usage, Validity, secret_text as text};

/// Path of the `KubeVirt` delete guard (upstream's).
pub const KUBEVIRT_PATH: &str = "/kubevirt-validate-delete";
/// Path of the `CDI` delete guard.
pub const CDI_PATH: &str = "/cdi-validate";
/// The webhook Service (upstream's name), in the operator's namespace.
pub const SERVICE: &str = "kubevirt-operator-webhook";
/// The operator's serving certificate (upstream's name).
pub const CERT_SECRET: &str = "kubevirt-operator-certs";
/// The webhook configuration (upstream's name).
pub const CONFIG: &str = "virt-operator-validator";
/// The strategy that blocks an uninstall while workloads exist.
pub const BLOCK: &str = "BlockUninstallIfWorkloadsExist";
/// Lifetime of the operator's certificate.
pub const LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// A certificate with less than this left is replaced at start.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Upstream's refusal of deleting the `KubeVirt` object while `what` (`Virtual Machine Instances`, …) exist.
pub fn kubevirt_refusal(what: &str) -> String {
    format!(
        "Rejecting the uninstall request, since there are still {what} present. Either delete all KubeVirt related workloads or change the uninstall strategy before uninstalling KubeVirt."
    )
}

/// Upstream's refusal of deleting the `CDI` object while `n` DataVolumes exist.
pub fn cdi_refusal(n: usize) -> String {
    format!(
        "rejecting the uninstall request, since there are still {n} DataVolumes present. Either delete all DataVolumes or change the uninstall strategy before uninstalling CDI"
    )
}

/// Whether deleting this `KubeVirt` object must look for workloads: the strategy blocks and it is deployed.
pub fn kubevirt_guarded(kv: &KubeVirt) -> bool {
    kv.spec.uninstall_strategy.as_deref() == Some(BLOCK)
        && kv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(crate::plan::kv_phase::DEPLOYED)
}

/// Whether deleting this `CDI` object must look for DataVolumes: the strategy blocks and it has a phase other than
/// `Error`.
pub fn cdi_guarded(cdi: &CDI) -> bool {
    let phase = cdi.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    cdi.spec.uninstall_strategy.as_deref() == Some(BLOCK) && !phase.is_empty() && phase != crate::plan::cdi_phase::ERROR
}

/// Whether any object of kind `K` exists in the cluster.
async fn any<K>(client: &kube::Client) -> Result<bool, String>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = Api::<K>::all(client.clone()).list_metadata(&ListParams::default().limit(1)).await;
    Ok(!list.map_err(|e| e.to_string())?.items.is_empty())
}

/// Why deleting `obj` (the object of a DELETE review) is refused, if it is.
async fn refusal(client: &kube::Client, path: &str, obj: &Value) -> Result<Option<String>, String> {
    match path {
        KUBEVIRT_PATH => {
            let kv: KubeVirt = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
            if !kubevirt_guarded(&kv) {
                return Ok(None);
            }
            // Upstream's order: the first kind found is named.
            if any::<VirtualMachineInstance>(client).await? {
                return Ok(Some(kubevirt_refusal("Virtual Machine Instances")));
            }
            if any::<VirtualMachine>(client).await? {
                return Ok(Some(kubevirt_refusal("Virtual Machines")));
            }
            if any::<VirtualMachineInstanceReplicaSet>(client).await? {
                return Ok(Some(kubevirt_refusal("Virtual Machine Instance Replica Sets")));
            }
            Ok(None)
        }
        CDI_PATH => {
            let cdi: CDI = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
            if !cdi_guarded(&cdi) {
                return Ok(None);
            }
            let api: Api<DataVolume> = Api::all(client.clone());
            let list = api.list_metadata(&ListParams::default()).await.map_err(|e| e.to_string())?;
            let n = list
                .items
                .iter()
                .filter(|d| {
                    d.metadata.labels.as_ref().is_none_or(|l| !l.contains_key("cdi.kubevirt.io/dataImportCron"))
                })
                .count();
            Ok((n > 0).then(|| cdi_refusal(n)))
        }
        _ => Ok(None),
    }
}

/// Answers one AdmissionReview `body` for `path`.
pub async fn review(client: &kube::Client, path: &str, body: &[u8]) -> Value {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return serde_json::to_value(AdmissionResponse::invalid(e.to_string()).into_review()).unwrap_or_default();
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            return serde_json::to_value(AdmissionResponse::invalid(e.to_string()).into_review()).unwrap_or_default();
        }
    };
    let response = AdmissionResponse::from(&request);
    let obj = request.old_object.as_ref().map(|o| serde_json::to_value(o).unwrap_or_default());
    let response = match obj {
        None => response,
        Some(obj) => match refusal(client, path, &obj).await {
            Ok(None) => response,
            Ok(Some(msg)) => response.deny(msg),
            Err(e) => response.deny(format!("checking for workloads: {e}")),
        },
    };
    serde_json::to_value(response.into_review()).unwrap_or_default()
}

/// The operator's serving certificate: the kept one while it has more than [`RENEW_BEFORE`] left, else a new CA
/// and leaf (created, or replaced; a replica racing another reads the winner's).
async fn certificate(client: &kube::Client, ns: &str) -> anyhow::Result<(String, String, String)> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let kept = api.get_opt(CERT_SECRET).await?;
    let usable = |s: &Secret| {
        let (ca, cert, key) = (text(s, "ca.crt")?, text(s, "tls.crt")?, text(s, "tls.key")?);
        let end = pki::not_after(&cert)?;
        (end.duration_since(SystemTime::now()).ok()? > RENEW_BEFORE).then_some((ca, cert, key))
    };
    if let Some(found) = kept.as_ref().and_then(usable) {
        return Ok(found);
    }
    let ca = Ca::generate("kubevirt-operator", Validity(LIFETIME))?;
    let names = [SERVICE.to_owned(), format!("{SERVICE}.{ns}"), format!("{SERVICE}.{ns}.svc")];
    let leaf = ca.issue("operator webhook", &names[2], &names, Usage::Server, Validity(LIFETIME))?;
    let data = [("ca.crt", &leaf.ca_pem), ("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(CERT_SECRET.into()),
            namespace: Some(ns.into()),
            labels: Some(
                [(crate::manifests::MANAGED_BY.to_owned(), crate::manifests::KUBEVIRT_MANAGER.to_owned())].into(),
            ),
            resource_version: kept.as_ref().and_then(|k| k.metadata.resource_version.clone()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    };
    let written = if kept.is_some() {
        api.replace(CERT_SECRET, &PostParams::default(), &secret).await
    } else {
        api.create(&PostParams::default(), &secret).await
    };
    match written {
        Ok(_) => Ok((leaf.ca_pem, leaf.cert_pem, leaf.key_pem)),
        // Another replica wrote it first: use its certificate.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api.get(CERT_SECRET).await?;
            usable(&s).ok_or_else(|| anyhow::anyhow!("Secret {CERT_SECRET} written by another replica is not usable"))
        }
        Err(e) => Err(e.into()),
    }
}

/// The webhook configuration for the operator's Service in `ns`, trusting `ca_pem`.
pub fn configuration(ns: &str, ca_pem: &str) -> Value {
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, group: &str, plural: &str, path: &str, policy: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": policy,
            "timeoutSeconds": 10,
            "clientConfig": {"caBundle": bundle, "service": {"name": SERVICE, "namespace": ns, "path": path, "port": 443}},
            "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["DELETE"], "resources": [plural], "scope": "*"}],
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIG, "labels": {crate::manifests::MANAGED_BY: crate::manifests::KUBEVIRT_MANAGER}},
        "webhooks": [
            hook("kubevirt-validator.kubevirt.io", "kubevirt.io", "kubevirts", KUBEVIRT_PATH, "Fail"),
            hook("cdi-validate.cdi.kubevirt.io", "cdi.kubevirt.io", "cdis", CDI_PATH, "Ignore"),
        ],
    })
}

/// Starts the guards on `addr` (every replica) and registers them (the configuration, applied idempotently).
pub async fn start(client: kube::Client, ns: &str, addr: SocketAddr) -> anyhow::Result<()> {
    let (ca, cert, key) = certificate(&client, ns).await?;
    let chain = controller_runtime::tls::certs_from_pem(cert.as_bytes(), CERT_SECRET)?;
    let key = controller_runtime::tls::key_from_pem(key.as_bytes(), CERT_SECRET)?;
    let tls = controller_runtime::tls::server_config(chain, key, None)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let served = client.clone();
    let handler = move |req: Request<hyper::body::Incoming>, _peer| {
        let client = served.clone();
        async move {
            let path = req.uri().path().to_owned();
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return Response::builder()
                        .status(StatusCode::BAD_REQUEST)
                        .body(Full::new(Bytes::new()))
                        .unwrap_or_default();
                }
            };
            if path == "/healthz" {
                return Response::new(Full::new(Bytes::from_static(b"ok")));
            }
            let answer = review(&client, &path, &body).await;
            Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))
                .unwrap_or_default()
        }
    };
    tokio::spawn(controller_runtime::tls::serve_tls(
        listener,
        tls,
        handler,
        futures::future::pending(),
        Duration::from_secs(5),
    ));
    let applier = crate::apply::Applier::new(client, crate::FIELD_MANAGER);
    applier.apply(&configuration(ns, &ca)).await?;
    tracing::info!(%addr, "uninstall guards served");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_apply_only_to_a_deployed_installation_with_the_blocking_strategy() {
        let kv = |strategy: Option<&str>, phase: Option<&str>| -> KubeVirt {
            serde_json::from_value(
                json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
                "spec": {"uninstallStrategy": strategy}, "status": {"phase": phase}}),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(kubevirt_guarded(&kv(Some(BLOCK), Some("Deployed"))));
        assert!(!kubevirt_guarded(&kv(Some(BLOCK), Some("Deploying"))));
        assert!(!kubevirt_guarded(&kv(Some("RemoveWorkloads"), Some("Deployed"))));
        assert!(!kubevirt_guarded(&kv(None, Some("Deployed"))));
        let cdi = |strategy: Option<&str>, phase: Option<&str>| -> CDI {
            serde_json::from_value(
                json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "metadata": {"name": "cdi"},
                "spec": {"uninstallStrategy": strategy}, "status": {"phase": phase}}),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(cdi_guarded(&cdi(Some(BLOCK), Some("Deployed"))));
        assert!(cdi_guarded(&cdi(Some(BLOCK), Some("Deploying"))));
        assert!(!cdi_guarded(&cdi(Some(BLOCK), Some("Error"))));
        assert!(!cdi_guarded(&cdi(Some(BLOCK), None)));
        assert!(!cdi_guarded(&cdi(None, Some("Deployed"))));
        assert_eq!(
            kubevirt_refusal("Virtual Machine Instances"),
            "Rejecting the uninstall request, since there are still Virtual Machine Instances present. Either delete all KubeVirt related workloads or change the uninstall strategy before uninstalling KubeVirt."
        );
        assert!(
            cdi_refusal(2).starts_with("rejecting the uninstall request, since there are still 2 DataVolumes present.")
        );
    }

    #[test]
    fn the_configuration_guards_deletes_of_both_objects_with_upstreams_policies() {
        let c = configuration("kubevirt", "PEM");
        let hooks = c["webhooks"].as_array().cloned().unwrap_or_default();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0]["failurePolicy"], "Fail");
        assert_eq!(hooks[0]["rules"][0]["resources"][0], "kubevirts");
        assert_eq!(hooks[0]["rules"][0]["operations"][0], "DELETE");
        assert_eq!(hooks[1]["failurePolicy"], "Ignore");
        assert_eq!(hooks[1]["clientConfig"]["service"]["path"], CDI_PATH);
        assert_eq!(hooks[0]["clientConfig"]["caBundle"], "UEVN");
    }
}
