//! The token API (binary `cdi-apiserver`, Deployment and Service `cdi-api` in `cdi`): an aggregated API
//! server for `upload.cdi.kubevirt.io/v1beta1` `uploadtokenrequests` (create only), registered by the
//! APIService `v1beta1.upload.cdi.kubevirt.io`.
//!
//! ```text
//! kube-apiserver ──mTLS (front-proxy client cert, CA + allowed names from
//!                  kube-system/extension-apiserver-authentication)──► route
//!   discovery: /apis, /apis/upload.cdi.kubevirt.io, /apis/upload.cdi.kubevirt.io/v1beta1
//!   POST …/namespaces/{ns}/uploadtokenrequests ─► identity from X-Remote-* headers
//!        ─► SubjectAccessReview (create uploadtokenrequests.upload.cdi.kubevirt.io in ns; 401 if denied)
//!        ─► token::sign (PS256, 5 min) ─► the object echoed with status.token
//! ```
//!
//! The signing key lives in Secret `cdi-api-signing-key` (`id_rsa`, `id_rsa.pub`), created on first start;
//! the proxy reads the public half from the same Secret.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::ByteString;
use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;
use tokio::net::TcpListener;

use crate::http::{Body, ConnInfo, json as json_response};
use crate::token;

pub use controller_runtime::aggregated::{Authorizer, Identity, RequestHeaderConfig, SarAuthorizer, identity};

pub use crds::cdi::consts::upload_token::{GROUP, KIND, RESOURCE, VERSION};
/// Secret holding the signing key.
pub const SIGNING_KEY_SECRET: &str = "cdi-api-signing-key";
/// Largest request body accepted.
const MAX_BODY: usize = 1 << 20;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The signing key Secret is unusable.
    #[error("invalid signing key Secret: {0}")]
    KeySecret(String),
    /// The front proxy's configuration could not be read or used.
    #[error(transparent)]
    Auth(#[from] controller_runtime::aggregated::Error),
    /// A Kubernetes API call failed.
    #[error("{what}")]
    Kube {
        /// The call.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// TLS material could not be built.
    #[error("TLS setup failed")]
    Tls(#[from] controller_runtime::tls::Error),
    /// Key handling failed.
    #[error("signing key")]
    Key(#[from] token::Error),
    /// Binding the listen address failed.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRoute {
    /// `/healthz`, `/readyz`, `/livez`.
    Health,
    /// `GET /apis`.
    Apis,
    /// `GET /apis/upload.cdi.kubevirt.io`.
    Group,
    /// `GET /apis/upload.cdi.kubevirt.io/v1beta1`.
    Resources,
    /// `POST …/namespaces/{ns}/uploadtokenrequests`.
    Create {
        /// The namespace.
        namespace: String,
    },
    /// A known resource path with another verb.
    MethodNotAllowed,
    /// Anything else.
    NotFound,
}

/// The route table.
pub fn api_route(method: &Method, path: &str) -> ApiRoute {
    let path = path.trim_end_matches('/');
    let get = method == Method::GET;
    match path {
        "/healthz" | "/readyz" | "/livez" => return ApiRoute::Health,
        "/apis" if get => return ApiRoute::Apis,
        p if p == format!("/apis/{GROUP}") && get => return ApiRoute::Group,
        p if p == format!("/apis/{GROUP}/{VERSION}") && get => return ApiRoute::Resources,
        _ => {}
    }
    let prefix = format!("/apis/{GROUP}/{VERSION}/namespaces/");
    if let Some(rest) = path.strip_prefix(&prefix)
        && let Some((ns, res)) = rest.split_once('/')
        && res == RESOURCE
        && !ns.is_empty()
    {
        return if method == Method::POST {
            ApiRoute::Create { namespace: ns.to_owned() }
        } else {
            ApiRoute::MethodNotAllowed
        };
    }
    ApiRoute::NotFound
}

fn group_json() -> serde_json::Value {
    let gv = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [gv], "preferredVersion": gv})
}

fn resources_json() -> serde_json::Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": [{
            "name": RESOURCE, "singularName": "uploadtokenrequest", "namespaced": true, "kind": KIND,
            "verbs": ["create"], "shortNames": ["utr", "utrs"]
        }]
    })
}

/// A `metav1.Status` failure.
pub fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(code, &controller_runtime::aggregated::status(code.as_u16(), reason, message))
}

/// Validates an `UploadTokenRequest` body; returns the object and the PVC name.
pub fn parse_request(body: &[u8], namespace: &str) -> Result<(serde_json::Value, String), String> {
    let mut obj: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    if obj.get("kind").and_then(|k| k.as_str()).is_some_and(|k| k != KIND) {
        return Err(format!("kind must be {KIND}"));
    }
    let pvc = obj
        .pointer("/spec/pvcName")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| String::from("spec.pvcName is required"))?
        .to_owned();
    if let Some(ns) = obj.pointer("/metadata/namespace").and_then(|v| v.as_str())
        && !ns.is_empty()
        && ns != namespace
    {
        return Err(String::from("the namespace of the object does not match the namespace of the request"));
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(format!("{GROUP}/{VERSION}")));
        o.insert("kind".into(), json!(KIND));
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert("namespace".into(), json!(namespace));
            m.insert(
                "creationTimestamp".into(),
                json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            );
        }
    }
    Ok((obj, pvc))
}

struct App<A> {
    auth: RequestHeaderConfig,
    authorizer: Arc<A>,
    key: jsonwebtoken::EncodingKey,
}

async fn create<A: Authorizer>(app: &App<A>, req: Request<Incoming>, ns: &str) -> Response<Body> {
    let Some(who) = identity(req.headers(), &app.auth) else {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "no user in the request headers");
    };
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &format!("reading the body: {e}")),
    };
    let (mut obj, pvc) = match parse_request(&body, ns) {
        Ok(r) => r,
        Err(m) => return status(StatusCode::BAD_REQUEST, "BadRequest", &m),
    };
    let what = ResourceAttributes {
        namespace: Some(ns.to_owned()),
        verb: Some(String::from("create")),
        group: Some(GROUP.to_owned()),
        version: Some(VERSION.to_owned()),
        resource: Some(RESOURCE.to_owned()),
        ..Default::default()
    };
    match app.authorizer.allowed(&who, &what).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(user = who.user, ns, "upload token denied");
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                &format!("User {} is not allowed to create {RESOURCE}.{GROUP} in namespace {ns}", who.user),
            );
        }
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e),
    }
    let tok = match token::sign(
        &app.key,
        token::UPLOAD_TOKEN_ISSUER,
        &token::Payload::upload(ns, &pvc),
        SystemTime::now(),
        token::TOKEN_LIFETIME,
    ) {
        Ok(t) => t,
        Err(e) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e.to_string()),
    };
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), json!({"token": tok}));
    }
    tracing::info!(user = who.user, ns, pvc, "issued upload token");
    json_response(StatusCode::CREATED, &obj)
}

async fn handle<A: Authorizer>(app: Arc<App<A>>, req: Request<Incoming>, conn: Arc<ConnInfo>) -> Response<Body> {
    let route = api_route(req.method(), req.uri().path());
    if route == ApiRoute::Health {
        return crate::http::text(StatusCode::OK, "ok");
    }
    if !app.auth.allows(conn.peer_cn.as_deref()) {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "a front-proxy client certificate is required");
    }
    match route {
        ApiRoute::Health => crate::http::text(StatusCode::OK, "ok"),
        ApiRoute::Apis => json_response(
            StatusCode::OK,
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_json()]}),
        ),
        ApiRoute::Group => json_response(StatusCode::OK, &group_json()),
        ApiRoute::Resources => json_response(StatusCode::OK, &resources_json()),
        ApiRoute::Create { namespace } => create(&app, req, &namespace).await,
        ApiRoute::MethodNotAllowed => {
            status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "only create is supported")
        }
        ApiRoute::NotFound => {
            status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource")
        }
    }
}

/// Returns the signing key pair (private PEM, public PEM) from Secret `ns/cdi-api-signing-key`, creating it
/// with a fresh RSA key when it does not exist.
pub async fn ensure_signing_key(client: &kube::Client, ns: &str) -> Result<(String, String)> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let kerr = |what: &str, source| Error::Kube { what: format!("{what} Secret {ns}/{SIGNING_KEY_SECRET}"), source };
    let read = |s: &Secret| -> Option<(String, String)> {
        let d = s.data.as_ref()?;
        let get = |k: &str| d.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
        Some((get("id_rsa")?, get("id_rsa.pub")?))
    };
    if let Some(s) = api.get_opt(SIGNING_KEY_SECRET).await.map_err(|e| kerr("reading", e))?
        && let Some(k) = read(&s)
    {
        return Ok(k);
    }
    let (private, public) = token::generate_key_pair()?;
    let mut s = Secret::default();
    s.metadata.name = Some(SIGNING_KEY_SECRET.to_owned());
    s.metadata.labels = Some([("cdi.kubevirt.io".to_owned(), "".to_owned())].into());
    s.data = Some(
        [
            ("id_rsa".to_owned(), ByteString(private.clone().into_bytes())),
            ("id_rsa.pub".to_owned(), ByteString(public.clone().into_bytes())),
        ]
        .into(),
    );
    match controller_runtime::api::create_if_absent(&api, &s).await {
        Ok(Some(_)) => Ok((private, public)),
        Ok(None) => {
            // Another replica won the race: use its key.
            let s = api.get(SIGNING_KEY_SECRET).await.map_err(|e| kerr("reading", e))?;
            read(&s).ok_or_else(|| Error::KeySecret(format!("Secret {SIGNING_KEY_SECRET} lacks id_rsa/id_rsa.pub")))
        }
        Err(e) => Err(kerr("creating", e)),
    }
}

/// A running API server.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Serves until the task ends (it does not on its own).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Stops serving.
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Starts serving on `listen` with a self-signed certificate for the `cdi-api` Service (the APIService sets
/// `insecureSkipTLSVerify`), trusting `auth`'s front-proxy CA for client certificates.
pub async fn start<A: Authorizer>(
    listen: SocketAddr,
    auth: RequestHeaderConfig,
    authorizer: Arc<A>,
    private_key_pem: &str,
    namespace: &str,
) -> Result<Running> {
    let key = token::encoding_key(private_key_pem.as_bytes())?;
    let names = ["cdi-api".to_owned(), format!("cdi-api.{namespace}"), format!("cdi-api.{namespace}.svc")];
    let (chain, skey, _) = controller_runtime::tls::self_signed(&names)?;
    let tls = controller_runtime::aggregated::front_proxy_tls(&auth, chain, skey)?;
    let listener = TcpListener::bind(listen).await.map_err(|source| Error::Bind { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: listen, source })?;
    let app = Arc::new(App { auth, authorizer, key });
    let handler = move |req, conn| handle(app.clone(), req, conn);
    let task = tokio::spawn(crate::http::serve_tls(
        listener,
        tls,
        handler,
        std::future::pending::<()>(),
        Duration::from_secs(5),
    ));
    Ok(Running { addr, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let p = format!("/apis/{GROUP}/{VERSION}/namespaces/ns1/uploadtokenrequests");
        assert_eq!(api_route(&Method::POST, &p), ApiRoute::Create { namespace: "ns1".into() });
        assert_eq!(api_route(&Method::GET, &p), ApiRoute::MethodNotAllowed);
        assert_eq!(api_route(&Method::GET, "/apis"), ApiRoute::Apis);
        assert_eq!(api_route(&Method::GET, "/apis/upload.cdi.kubevirt.io"), ApiRoute::Group);
        assert_eq!(api_route(&Method::GET, "/apis/upload.cdi.kubevirt.io/v1beta1/"), ApiRoute::Resources);
        assert_eq!(api_route(&Method::GET, "/healthz"), ApiRoute::Health);
        assert_eq!(
            api_route(&Method::POST, "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces//uploadtokenrequests"),
            ApiRoute::NotFound
        );
        assert_eq!(api_route(&Method::GET, "/api/v1"), ApiRoute::NotFound);
    }

    #[test]
    fn request_body_validation() {
        let (obj, pvc) = parse_request(
            br#"{"apiVersion":"upload.cdi.kubevirt.io/v1beta1","kind":"UploadTokenRequest","metadata":{"name":"t"},"spec":{"pvcName":"disk"}}"#,
            "ns",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pvc, "disk");
        assert_eq!(obj.pointer("/metadata/namespace"), Some(&json!("ns")));
        assert!(parse_request(br#"{"spec":{}}"#, "ns").is_err());
        assert!(parse_request(br#"{"kind":"Pod","spec":{"pvcName":"x"}}"#, "ns").is_err());
        assert!(parse_request(br#"{"metadata":{"namespace":"other"},"spec":{"pvcName":"x"}}"#, "ns").is_err());
        assert!(parse_request(b"nope", "ns").is_err());
    }
}
