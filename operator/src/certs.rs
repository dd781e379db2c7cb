//! The KubeVirt half's certificates, kept in Secrets and renewed before they expire (upstream's
//! `certificateRotateStrategy.selfSigned`: CA 7 days, certificates 24 hours, each renewed when a fifth of its
//! lifetime is left).
//!
//! One CA (Secret [`CA_SECRET`], with its key) signs three leaves: virt-api's serving certificate, the node
//! agents' serving certificate and virt-api's client certificate for the node API. Every leaf Secret's `ca.crt` and
//! the webhooks' `caBundle` hold the CA *bundle*: the current CA and, after a CA renewal, the previous one while it
//! is still valid, so that pods still serving a certificate of the old CA stay trusted while they roll. A renewed
//! leaf changes the digest the pods that mount it carry (`manifests::CERTIFICATES_HASH`), which rolls them.
//!
//! [`plan`] is pure; [`ensure`] reads and writes the Secrets.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use contracts::kubevirt::node_api;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams};
use sha2::{Digest, Sha256};

use crate::manifests::{KUBEVIRT_MANAGER, MANAGED_BY};
use crate::pki::{self, Ca, Pki, Usage, Validity, secret_text as text};

/// The CA's Secret (`tls.crt`, `tls.key`; `ca-previous.crt` after a renewal) and the bundle's ConfigMap
/// (`ca-bundle`), upstream's names.
pub const CA_SECRET: &str = "kubevirt-ca";
/// Annotation of a leaf Secret: the digest of the CA that signed it (a leaf of an older CA is re-issued).
pub const ISSUER_ANNOTATION: &str = "kubevirt-rs.io/issuer";
/// Upstream's annotation of the lifetime a Secret's certificate was issued with.
pub const DURATION_ANNOTATION: &str = "kubevirt.io/duration";

/// Lifetime of one kind of certificate and how long before its end it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Validity of a new certificate.
    pub duration: Duration,
    /// Renew when less than this is left.
    pub renew_before: Duration,
}

impl Lifetime {
    fn with_default_renewal(duration: Duration) -> Lifetime {
        Lifetime { duration, renew_before: duration / 5 }
    }
}

/// `spec.certificateRotateStrategy.selfSigned` of the `KubeVirt` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The CA.
    pub ca: Lifetime,
    /// The leaves.
    pub server: Lifetime,
}

impl Default for Rotation {
    fn default() -> Self {
        Rotation {
            ca: Lifetime::with_default_renewal(Validity::CA.0),
            server: Lifetime::with_default_renewal(Validity::LEAF.0),
        }
    }
}

/// Parses a Go duration (`168h`, `1h30m`, `90s`, `24h0m0s`, `1.5h`).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += n * factor;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

impl Rotation {
    /// The rotation a `KubeVirt` object asks for (unset fields: upstream's defaults; `renewBefore` defaults to a
    /// fifth of the duration). An unparsable duration or a `renewBefore` not shorter than its duration is refused.
    pub fn of(spec_extra: &BTreeMap<String, serde_json::Value>) -> Result<Rotation, String> {
        let mut r = Rotation::default();
        let self_signed = spec_extra.get("certificateRotateStrategy").map(|c| &c["selfSigned"]);
        let Some(ss) = self_signed.filter(|v| v.is_object()) else { return Ok(r) };
        for (key, target) in [("ca", &mut r.ca), ("server", &mut r.server)] {
            let field = |f: &str| -> Result<Option<Duration>, String> {
                match ss[key][f].as_str() {
                    None => Ok(None),
                    Some(v) => parse_go_duration(v).map(Some).ok_or_else(|| {
                        format!("certificateRotateStrategy.selfSigned.{key}.{f}: invalid duration {v:?}")
                    }),
                }
            };
            if let Some(d) = field("duration")? {
                *target = Lifetime::with_default_renewal(d);
            }
            if let Some(rb) = field("renewBefore")? {
                target.renew_before = rb;
            }
            if target.renew_before >= target.duration {
                return Err(format!(
                    "certificateRotateStrategy.selfSigned.{key}.renewBefore must be shorter than its duration"
                ));
            }
        }
        Ok(r)
    }
}

/// One leaf certificate of the KubeVirt half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf {
    /// Its Secret.
    pub secret: &'static str,
    /// Serving or client.
    pub usage: Usage,
    /// Common name.
    pub common_name: &'static str,
}

/// The leaves: virt-api's serving certificate, the node agents' serving certificate, virt-api's client certificate.
pub const LEAVES: [Leaf; 3] = [
    Leaf { secret: pki::TLS_SECRET, usage: Usage::Server, common_name: contracts::kubevirt::consts::webhook::SERVICE },
    Leaf { secret: node_api::SERVER_SECRET, usage: Usage::Server, common_name: node_api::SERVER_NAME },
    Leaf { secret: node_api::CLIENT_SECRET, usage: Usage::Client, common_name: node_api::CLIENT_COMMON_NAME },
];

/// What is kept of a leaf today.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafState {
    /// End of its validity.
    pub not_after: Option<SystemTime>,
    /// Whether the current CA signed it.
    pub by_current_ca: bool,
}

/// What to (re)issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPlan {
    /// A new CA (none kept, unreadable, or due for renewal).
    pub new_ca: bool,
    /// The leaves to issue, by Secret name.
    pub issue: Vec<&'static str>,
    /// When the next renewal falls due (the reconcile comes back then).
    pub next_due: Option<SystemTime>,
}

fn due(not_after: Option<SystemTime>, l: Lifetime, now: SystemTime) -> bool {
    not_after.is_none_or(|t| t.checked_sub(l.renew_before).is_none_or(|at| at <= now))
}

/// Decides the renewals: the CA when absent or within its `renewBefore`, a leaf when absent, within its
/// `renewBefore`, signed by another CA, or when the CA is renewed.
pub fn plan(
    now: SystemTime,
    ca: Option<SystemTime>,
    leaves: &[(&'static str, Option<LeafState>)],
    r: Rotation,
) -> CertPlan {
    let new_ca = due(ca, r.ca, now);
    let issue = leaves
        .iter()
        .filter(|(_, st)| new_ca || st.as_ref().is_none_or(|s| !s.by_current_ca || due(s.not_after, r.server, now)))
        .map(|(name, _)| *name)
        .collect::<Vec<_>>();
    let renewal = |t: Option<SystemTime>, l: Lifetime| t.and_then(|t| t.checked_sub(l.renew_before));
    let next_due = if new_ca || !issue.is_empty() {
        None
    } else {
        std::iter::once(renewal(ca, r.ca))
            .chain(leaves.iter().map(|(_, s)| renewal(s.as_ref()?.not_after, r.server)))
            .flatten()
            .min()
    };
    CertPlan { new_ca, issue, next_due }
}

/// The certificates in effect after [`ensure`].
#[derive(Debug, Clone)]
pub struct Certificates {
    /// The CA bundle, base64 (the webhooks' and APIService's `caBundle`).
    pub ca_bundle: String,
    /// Digest of the leaves (the pods that mount them carry it).
    pub hash: String,
    /// When to look again.
    pub next_due: Option<SystemTime>,
}

/// Certificate I/O failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a Secret.
    #[error("certificate Secret {name}: {source}")]
    Api {
        /// The Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Generating a certificate.
    #[error(transparent)]
    Generate(#[from] pki::Error),
    /// `certificateRotateStrategy` is invalid.
    #[error("{0}")]
    Config(String),
}

fn digest(s: &str) -> String {
    Sha256::digest(s.as_bytes())[..12].iter().map(|b| format!("{b:02x}")).collect()
}

fn secret(name: &str, ns: &str, data: &[(&str, &str)], annotations: &[(&str, String)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some([(MANAGED_BY.to_owned(), KUBEVIRT_MANAGER.to_owned())].into()),
            annotations: Some(annotations.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

/// Brings the CA and the leaves of namespace `ns` up to date ([`plan`]) and returns the bundle and digest the
/// manifests are rendered with.
pub async fn ensure(client: &kube::Client, ns: &str, r: Rotation, field_manager: &str) -> Result<Certificates, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let get = |name: &'static str| {
        let api = api.clone();
        async move { api.get_opt(name).await.map_err(|source| Error::Api { name: name.into(), source }) }
    };
    let put = |s: Secret| {
        let api = api.clone();
        async move {
            let name = s.metadata.name.clone().unwrap_or_default();
            let pp = PatchParams::apply(field_manager).force();
            api.patch(&name, &pp, &Patch::Apply(&s)).await.map_err(|source| Error::Api { name, source })
        }
    };
    let now = SystemTime::now();
    let ca_secret = get(CA_SECRET).await?;
    let kept_ca = ca_secret.as_ref().and_then(|s| Ca::from_pem(&text(s, "tls.crt")?, &text(s, "tls.key")?));
    let ca_end = kept_ca.as_ref().and_then(|c| pki::not_after(&c.pem));
    let mut leaves = Vec::new();
    let mut kept = BTreeMap::new();
    for leaf in LEAVES {
        let s = get(leaf.secret).await?;
        let state = s.as_ref().and_then(|s| {
            let cert = text(s, "tls.crt")?;
            text(s, "tls.key")?;
            let issuer = s.metadata.annotations.as_ref()?.get(ISSUER_ANNOTATION)?;
            Some(LeafState {
                not_after: pki::not_after(&cert),
                by_current_ca: kept_ca.as_ref().is_some_and(|c| &digest(&c.pem) == issuer),
            })
        });
        if let Some(s) = s {
            kept.insert(leaf.secret, s);
        }
        leaves.push((leaf.secret, state));
    }
    let p = plan(now, ca_end, &leaves, r);
    let (ca, previous) = match kept_ca {
        Some(ca) if !p.new_ca => {
            let prev = ca_secret.as_ref().and_then(|s| text(s, "ca-previous.crt"));
            (ca, prev)
        }
        old => {
            let ca = Ca::generate("kubevirt.io", Validity(r.ca.duration))?;
            let prev = old.filter(|o| pki::not_after(&o.pem).is_some_and(|t| t > now)).map(|o| o.pem);
            let mut data = vec![("tls.crt", ca.pem.as_str()), ("tls.key", ca.key_pem.as_str())];
            if let Some(prev) = prev.as_deref() {
                data.push(("ca-previous.crt", prev));
            }
            put(secret(CA_SECRET, ns, &data, &[(DURATION_ANNOTATION, format!("{:?}", r.ca.duration))])).await?;
            tracing::info!(namespace = ns, "issued a new KubeVirt CA");
            (ca, prev)
        }
    };
    let previous = previous.filter(|p| pki::not_after(p).is_some_and(|t| t > now));
    let bundle = match &previous {
        Some(prev) => format!("{}{}", ca.pem, prev),
        None => ca.pem.clone(),
    };
    let issuer = digest(&ca.pem);
    let mut certs = Vec::new();
    for leaf in LEAVES {
        let names: Vec<String> = match leaf.secret {
            pki::TLS_SECRET => pki::service_names(ns),
            _ if leaf.usage == Usage::Server => vec![leaf.common_name.to_owned()],
            _ => vec![],
        };
        let kept_leaf = kept.get(leaf.secret).and_then(|s| Some((text(s, "tls.crt")?, text(s, "tls.key")?)));
        let (cert, key) = match kept_leaf {
            Some(k) if !p.issue.contains(&leaf.secret) => k,
            _ => {
                let Pki { cert_pem, key_pem, .. } =
                    ca.issue(leaf.secret, leaf.common_name, &names, leaf.usage, Validity(r.server.duration))?;
                tracing::info!(namespace = ns, secret = leaf.secret, "issued a certificate");
                (cert_pem, key_pem)
            }
        };
        // Written every pass: the bundle in ca.crt follows CA renewals even for a leaf kept as it is.
        let annotations =
            [(ISSUER_ANNOTATION, issuer.clone()), (DURATION_ANNOTATION, format!("{:?}", r.server.duration))];
        let data = [("tls.crt", cert.as_str()), ("tls.key", key.as_str()), ("ca.crt", bundle.as_str())];
        put(secret(leaf.secret, ns, &data, &annotations)).await?;
        certs.push(cert);
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CA_SECRET.into()),
            namespace: Some(ns.into()),
            labels: Some([(MANAGED_BY.to_owned(), KUBEVIRT_MANAGER.to_owned())].into()),
            ..Default::default()
        },
        data: Some([("ca-bundle".to_owned(), bundle.clone())].into()),
        ..Default::default()
    };
    cms.patch(CA_SECRET, &PatchParams::apply(field_manager).force(), &Patch::Apply(&cm))
        .await
        .map_err(|source| Error::Api { name: CA_SECRET.into(), source })?;
    let next_due =
        if p.next_due.is_some() { p.next_due } else { Some(now + r.server.duration - r.server.renew_before) };
    Ok(Certificates {
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(&bundle),
        hash: digest(&(certs.concat() + &bundle)),
        next_due,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);

    fn t(hours: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + H * hours as u32 + Duration::from_secs(1_000_000_000)
    }

    fn leaf(end_h: u64, by_current_ca: bool) -> Option<LeafState> {
        Some(LeafState { not_after: Some(t(end_h)), by_current_ca })
    }

    #[test]
    fn renewals_follow_lifetimes_and_the_ca() {
        let r = Rotation::default(); // CA 168h renewed 33.6h before; leaves 24h renewed 4.8h before.
        let all = |s: Option<LeafState>| vec![("a", s.clone()), ("b", s.clone()), ("c", s)];
        // Nothing kept: a CA and every leaf.
        let p = plan(t(0), None, &all(None), r);
        assert!(p.new_ca);
        assert_eq!(p.issue, ["a", "b", "c"]);
        // All fresh: nothing, and the next look is at the earliest renewal (leaves end at 24h: due at 19.2h).
        let p = plan(t(0), Some(t(168)), &all(leaf(24, true)), r);
        assert_eq!((p.new_ca, p.issue.len()), (false, 0));
        assert_eq!(p.next_due, Some(t(24) - H / 5 * 24));
        // One leaf inside its renewal window, one by another CA.
        let leaves = vec![("a", leaf(24, true)), ("b", leaf(4, true)), ("c", leaf(24, false))];
        assert_eq!(plan(t(0), Some(t(168)), &leaves, r).issue, ["b", "c"]);
        // The CA inside its window: a new CA and every leaf with it.
        let p = plan(t(140), Some(t(168)), &all(leaf(160, true)), r);
        assert!(p.new_ca);
        assert_eq!(p.issue.len(), 3);
    }

    #[test]
    fn rotation_settings_are_read_as_upstreams() {
        let extra = |v: serde_json::Value| -> BTreeMap<String, serde_json::Value> {
            [("certificateRotateStrategy".to_owned(), v)].into()
        };
        assert_eq!(Rotation::of(&BTreeMap::new()), Ok(Rotation::default()));
        let r = Rotation::of(&extra(serde_json::json!({"selfSigned": {"ca": {"duration": "48h"},
                                     "server": {"duration": "2h", "renewBefore": "1h30m"}}})))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.ca, Lifetime { duration: H * 48, renew_before: H * 48 / 5 });
        assert_eq!(r.server, Lifetime { duration: H * 2, renew_before: H * 3 / 2 });
        let bad = Rotation::of(&extra(serde_json::json!({"selfSigned": {"server": {"duration": "1x"}}})));
        assert!(bad.is_err_and(|e| e.contains("server.duration")));
        let bad = Rotation::of(&extra(
            serde_json::json!({"selfSigned": {"server": {"duration": "1h", "renewBefore": "2h"}}}),
        ));
        assert!(bad.is_err_and(|e| e.contains("renewBefore")));
        assert_eq!(parse_go_duration("24h0m0s"), Some(H * 24));
        assert_eq!(parse_go_duration("1.5h"), Some(H * 3 / 2));
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("10"), None);
    }
}
