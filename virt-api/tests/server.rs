//! The HTTPS server on a local port with a certificate of `virt_api::pki`: `/healthz`, the three webhook paths,
//! and what upstream answers to requests it cannot use (wrong content type: 400; unknown path: 404).

use std::sync::Arc;

use serde_json::{Value, json};
use virt_api::config::Config;
use virt_api::server::{self, Certificate};
use virt_operator::pki::Pki;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn serves_the_webhooks_over_tls() {
    let pki = ok(Pki::generate(&["localhost".to_owned(), "127.0.0.1".to_owned()]));
    let dir = ok(tempfile::tempdir());
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    ok(std::fs::write(&cert, &pki.cert_pem));
    ok(std::fs::write(&key, &pki.key_pem));
    let tls = ok(server::tls_config(&Certificate::Files { cert, key }, None));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running =
        ok(server::start(ok("127.0.0.1:0".parse()), tls, Arc::new(Config::default()), None, None, async move {
            let _ = stop_rx.await;
        })
        .await);
    let base = format!("https://localhost:{}", running.addr.port());
    let http = ok(reqwest::Client::builder()
        .add_root_certificate(ok(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes())))
        .build());

    let health = ok(http.get(format!("{base}/healthz")).send().await);
    assert_eq!(health.status(), 200);
    assert_eq!(ok(health.text().await), "ok");
    assert_eq!(ok(http.get(format!("{base}/nothing")).send().await).status(), 404);

    let object = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "v", "namespace": "default"},
        "spec": {"domain": {"devices": {}}}
    });
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
        "operation": "CREATE", "userInfo": {"username": "alice"}, "object": object, "oldObject": null
    }});
    let body = review.to_string();
    let post = |path: &'static str| {
        http.post(format!("{base}{path}")).header("content-type", "application/json").body(body.clone()).send()
    };
    let json = |text: String| -> Value { ok(serde_json::from_str(&text)) };
    let mutated = json(ok(ok(post("/virtualmachineinstances-mutate").await).text().await));
    assert_eq!(
        (mutated["response"]["uid"].as_str(), mutated["response"]["allowed"].as_bool()),
        (Some("u1"), Some(true))
    );
    assert!(mutated["response"]["patch"].is_string(), "{mutated}");
    let validated = json(ok(ok(post("/virtualmachineinstances-validate-create").await).text().await));
    assert_eq!(validated["response"]["allowed"], json!(false));
    assert_eq!(validated["response"]["status"]["reason"], json!("Invalid"));
    let update = json(ok(ok(post("/virtualmachineinstances-validate-update").await).text().await));
    assert_eq!(update["response"]["allowed"], json!(true), "a CREATE is not the update validator's business");

    let text = ok(http.post(format!("{base}/virtualmachineinstances-mutate")).body("{}").send().await);
    assert_eq!(text.status(), 400, "no application/json content type");
    let _ = stop_tx.send(());
    running.wait().await;
}
