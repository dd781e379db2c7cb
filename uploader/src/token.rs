//! Upload tokens: compact JWS signed PS256 with the cdi-apiserver's RSA key, exactly as upstream CDI
//! (`pkg/token`): public claims `iss`, `iat`, `nbf`, `exp` (5 minutes) plus the private [`Payload`] claims
//! `operation`, `name`, `namespace`, `resource` (and optional `params`). Verification checks the signature,
//! the issuer and the times with a leeway (the proxy uses 10 s), like go-jose's `ValidateWithLeeway`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// Issuer of upload tokens (upstream `common.UploadTokenIssuer`).
pub const UPLOAD_TOKEN_ISSUER: &str = "cdi-apiserver";
/// Lifetime of an upload token.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// Clock skew tolerated by the proxy.
pub const TOKEN_LEEWAY: Duration = Duration::from_secs(10);

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PEM key could not be parsed.
    #[error("invalid {what} key")]
    Key {
        /// `private` or `public`.
        what: &'static str,
        /// The cause.
        #[source]
        source: jsonwebtoken::errors::Error,
    },
    /// Signing failed.
    #[error("signing the token failed")]
    Sign(#[source] jsonwebtoken::errors::Error),
    /// The token is malformed, badly signed, from another issuer, expired or not yet valid.
    #[error("invalid token")]
    Invalid(#[source] jsonwebtoken::errors::Error),
    /// The token was issued in the future (beyond the leeway).
    #[error("invalid token: issued in the future")]
    IssuedInTheFuture,
    /// Generating a key pair failed.
    #[error("generating an RSA key pair failed: {0}")]
    KeyGen(String),
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a token allows (upstream `token.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Operation {
    /// Upload into a PVC.
    Upload,
    /// Clone a PVC.
    Clone,
    /// Anything else (or absent): never accepted by the proxy.
    #[default]
    #[serde(other)]
    Unknown,
}

/// `metav1.GroupVersionResource` as serialised in the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GroupVersionResource {
    /// API group (`""` for core).
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Resource (plural).
    #[serde(default)]
    pub resource: String,
}

impl GroupVersionResource {
    /// `persistentvolumeclaims` in core/v1, the resource of upload tokens.
    pub fn pvcs() -> Self {
        GroupVersionResource {
            group: String::new(),
            version: String::from("v1"),
            resource: String::from("persistentvolumeclaims"),
        }
    }
}

/// The private claims (upstream `token.Payload`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Payload {
    /// The operation.
    #[serde(default)]
    pub operation: Operation,
    /// Name of the PVC.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace of the PVC.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The resource the name refers to.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// Extra parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

impl Payload {
    /// An upload token's payload for PVC `namespace/name`.
    pub fn upload(namespace: &str, name: &str) -> Self {
        Payload {
            operation: Operation::Upload,
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            resource: GroupVersionResource::pvcs(),
            params: BTreeMap::new(),
        }
    }

    /// Whether this payload is a usable upload token (upstream's proxy checks: operation `Upload`, non-empty
    /// name and namespace, resource `persistentvolumeclaims`).
    pub fn is_valid_upload(&self) -> bool {
        self.operation == Operation::Upload
            && !self.name.is_empty()
            && !self.namespace.is_empty()
            && self.resource.resource == "persistentvolumeclaims"
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    #[serde(flatten)]
    payload: Payload,
    iss: String,
    iat: u64,
    nbf: u64,
    exp: u64,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Signs `payload` at time `now` (valid from `now` for `lifetime`) with `issuer`, PS256.
pub fn sign(key: &EncodingKey, issuer: &str, payload: &Payload, now: SystemTime, lifetime: Duration) -> Result<String> {
    let t = unix(now);
    let claims =
        Claims { payload: payload.clone(), iss: issuer.to_owned(), iat: t, nbf: t, exp: t + lifetime.as_secs() };
    let mut header = Header::new(Algorithm::PS256);
    header.typ = None; // go-jose's signer sets only "alg"
    jsonwebtoken::encode(&header, &claims, key).map_err(Error::Sign)
}

/// Verifies `token` (signature PS256 with `key`, issuer, `nbf`/`exp`/`iat` against `now` with `leeway`) and
/// returns its payload. Whether the payload is an upload token is the caller's check
/// ([`Payload::is_valid_upload`]).
pub fn verify(key: &DecodingKey, issuer: &str, token: &str, now: SystemTime, leeway: Duration) -> Result<Payload> {
    let mut v = Validation::new(Algorithm::PS256);
    v.set_issuer(&[issuer]);
    v.set_required_spec_claims(&["exp", "iss"]);
    v.validate_nbf = false; // checked below against `now`, like exp
    v.validate_exp = false; // checked below against `now` (jsonwebtoken uses the wall clock)
    v.leeway = 0;
    let data = jsonwebtoken::decode::<Claims>(token, key, &v).map_err(Error::Invalid)?;
    let c = data.claims;
    let (t, l) = (unix(now), leeway.as_secs());
    use jsonwebtoken::errors::ErrorKind as K;
    if t.saturating_sub(l) > c.exp {
        return Err(Error::Invalid(K::ExpiredSignature.into()));
    }
    if t + l < c.nbf {
        return Err(Error::Invalid(K::ImmatureSignature.into()));
    }
    if t + l < c.iat {
        return Err(Error::IssuedInTheFuture);
    }
    Ok(c.payload)
}

/// The signing key from a PEM RSA private key (PKCS#1 or PKCS#8).
pub fn encoding_key(pem: &[u8]) -> Result<EncodingKey> {
    EncodingKey::from_rsa_pem(pem).map_err(|source| Error::Key { what: "private", source })
}

/// The verification key from a PEM RSA public key (`PUBLIC KEY` or `RSA PUBLIC KEY`).
pub fn decoding_key(pem: &[u8]) -> Result<DecodingKey> {
    DecodingKey::from_rsa_pem(pem).map_err(|source| Error::Key { what: "public", source })
}

/// A fresh 2048-bit RSA key pair as PEM: (private key PKCS#8, public key SPKI).
pub fn generate_key_pair() -> Result<(String, String)> {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).map_err(|e| Error::KeyGen(e.to_string()))?;
    Ok((kp.serialize_pem(), kp.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn keys() -> &'static (String, String) {
        static K: OnceLock<(String, String)> = OnceLock::new();
        K.get_or_init(|| generate_key_pair().unwrap_or_else(|e| panic!("{e}")))
    }

    fn ek() -> EncodingKey {
        encoding_key(keys().0.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn dk() -> DecodingKey {
        decoding_key(keys().1.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    const T0: u64 = 1_800_000_000;

    fn token_at(t: u64) -> String {
        sign(&ek(), UPLOAD_TOKEN_ISSUER, &Payload::upload("ns", "pvc"), at(t), TOKEN_LIFETIME)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn round_trip_and_wire_format() {
        let tok = token_at(T0);
        let p = verify(&dk(), UPLOAD_TOKEN_ISSUER, &tok, at(T0 + 1), TOKEN_LEEWAY).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p, Payload::upload("ns", "pvc"));
        assert!(p.is_valid_upload());
        // Header and claims as upstream serialises them.
        let parts: Vec<&str> = tok.split('.').collect();
        assert_eq!(parts.len(), 3);
        use base64::Engine as _;
        let dec = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&dec(parts[0])), r#"{"alg":"PS256"}"#);
        let claims: serde_json::Value = serde_json::from_slice(&dec(parts[1])).unwrap_or_default();
        assert_eq!(
            claims,
            serde_json::json!({"operation":"Upload","name":"pvc","namespace":"ns",
                "resource":{"group":"","version":"v1","resource":"persistentvolumeclaims"},
                "iss":"cdi-apiserver","iat":T0,"nbf":T0,"exp":T0 + 300})
        );
    }

    #[test]
    fn expiry_with_leeway() {
        let tok = token_at(T0);
        let v = |t| verify(&dk(), UPLOAD_TOKEN_ISSUER, &tok, at(t), TOKEN_LEEWAY);
        assert!(v(T0 + 300).is_ok());
        assert!(v(T0 + 310).is_ok(), "within the 10 s leeway");
        assert!(matches!(v(T0 + 311), Err(Error::Invalid(_))));
        assert!(v(T0 - 10).is_ok(), "nbf within leeway");
        assert!(matches!(v(T0 - 11), Err(Error::Invalid(_))));
    }

    #[test]
    fn wrong_issuer_key_or_tampering_is_rejected() {
        let other =
            sign(&ek(), "cdi-deployment", &Payload::upload("ns", "pvc"), at(T0), TOKEN_LIFETIME).unwrap_or_default();
        assert!(matches!(verify(&dk(), UPLOAD_TOKEN_ISSUER, &other, at(T0), TOKEN_LEEWAY), Err(Error::Invalid(_))));
        let (_, other_pub) = generate_key_pair().unwrap_or_else(|e| panic!("{e}"));
        let dk2 = decoding_key(other_pub.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert!(verify(&dk2, UPLOAD_TOKEN_ISSUER, &token_at(T0), at(T0), TOKEN_LEEWAY).is_err());
        let tok = token_at(T0);
        let mut parts: Vec<String> = tok.split('.').map(str::to_owned).collect();
        use base64::Engine as _;
        let forged = serde_json::json!({"operation":"Upload","name":"other","namespace":"ns",
            "resource":{"group":"","version":"v1","resource":"persistentvolumeclaims"},
            "iss":"cdi-apiserver","iat":T0,"nbf":T0,"exp":T0 + 300});
        parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged.to_string());
        assert!(verify(&dk(), UPLOAD_TOKEN_ISSUER, &parts.join("."), at(T0), TOKEN_LEEWAY).is_err());
        assert!(verify(&dk(), UPLOAD_TOKEN_ISSUER, "not-a-jwt", at(T0), TOKEN_LEEWAY).is_err());
    }

    #[test]
    fn payload_checks_match_upstreams_proxy() {
        let ok = Payload::upload("ns", "pvc");
        assert!(ok.is_valid_upload());
        assert!(!Payload { operation: Operation::Clone, ..ok.clone() }.is_valid_upload());
        assert!(!Payload { name: String::new(), ..ok.clone() }.is_valid_upload());
        assert!(!Payload { namespace: String::new(), ..ok.clone() }.is_valid_upload());
        let mut r = ok.clone();
        r.resource.resource = String::from("pods");
        assert!(!r.is_valid_upload());
        // Unknown operations parse (and are refused), as Go's string type would carry them.
        let p: Payload = serde_json::from_str(r#"{"operation":"Delete","name":"a","namespace":"b"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.operation, Operation::Unknown);
        // A clone token signed by the same key is a valid JWT but not an upload token.
        let clone = Payload { operation: Operation::Clone, ..ok };
        let tok = sign(&ek(), UPLOAD_TOKEN_ISSUER, &clone, at(T0), TOKEN_LIFETIME).unwrap_or_default();
        let p = verify(&dk(), UPLOAD_TOKEN_ISSUER, &tok, at(T0), TOKEN_LEEWAY).unwrap_or_else(|e| panic!("{e}"));
        assert!(!p.is_valid_upload());
    }
}
