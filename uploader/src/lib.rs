//! CDI's upload path, three binaries over one library:
//!
//! ```text
//! virtctl / curl ──HTTPS + Bearer token──► uploadproxy (Deployment cdi-uploadproxy, :8443)
//!        │                                   │ token::verify (PS256, issuer cdi-apiserver, 10 s leeway)
//!        │ UploadTokenRequest                │ PVC readiness (annotations), content-type path rewrite
//!        ▼                                   ▼ EndpointSlice of Service cdi-upload-<pvc> → pod IP:8443, mTLS
//! kube-apiserver ──front-proxy mTLS──► cdi-apiserver            uploadserver (pod cdi-upload-<pvc>)
//!   (aggregation)    SubjectAccessReview, token::sign            body ─► importer push source ─► pipeline
//! ```
//!
//! * [`token`]: the upload token (compact JWS, PS256) — pure signing and verification.
//! * TLS (certificate loading, rustls configurations, the accept loop) is the importer's
//!   `controller_runtime::tls`, shared with the clone source and pod-mode metrics.
//! * [`server`]: the upload server (routes, single-upload state machine, importer pipeline, progress metric,
//!   termination message).
//! * [`proxy`]: the upload proxy (routes, token checks, readiness, path rewrite, streaming reverse proxy).
//! * [`apiserver`]: the aggregated API server for `upload.cdi.kubevirt.io/v1beta1` `uploadtokenrequests`.
//! * [`http`]: small HTTP helpers shared by the three servers.

#![deny(missing_docs)]

pub mod apiserver;
pub mod http;
pub mod proxy;
pub mod server;
pub mod token;
