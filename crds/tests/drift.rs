//! The committed CRD YAML under `deploy/crds/` must equal what the types generate.

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for (file, yaml) in crds::crd::render_all().unwrap_or_else(|e| panic!("rendering CRDs: {e}")) {
        let path = dir.join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert!(
            committed == yaml,
            "{} is out of date; regenerate with `cargo run -p crds --bin crdgen`",
            path.display()
        );
    }
}

#[test]
fn datavolume_crd_has_columns_short_names_status_and_cel() {
    let crd = crds::cdi::crd::datavolume().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["dv".to_owned(), "dvs".to_owned()][..]));
    let v = &crd.spec.versions[0];
    let cols: Vec<_> = v.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
    // Upstream's four, then ours: the transfer detail (the Running condition's message).
    assert_eq!(cols, ["Phase", "Progress", "Restarts", "Age", "Transfer"]);
    assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let yaml = crds::crd::render(&crd).unwrap_or_else(|e| panic!("{e}"));
    for needle in ["Cannot update DataVolume Spec", "Multiple Data volume sources", "Invalid checksum format: "] {
        assert!(yaml.contains(needle), "missing rule {needle}");
    }
}

#[test]
fn acronym_field_names_match_upstream_json() {
    use crds::cdi::config::{CDIConfigSpec, ImportProxy};
    let spec = CDIConfigSpec {
        upload_proxy_url_override: Some("u".into()),
        data_volume_ttl_seconds: Some(1),
        import_proxy: Some(ImportProxy {
            http_proxy: Some("h".into()),
            https_proxy: Some("s".into()),
            no_proxy: Some("n".into()),
            trusted_ca_proxy: Some("t".into()),
        }),
        ..Default::default()
    };
    let json = serde_json::to_string(&spec).unwrap_or_default();
    for key in
        ["uploadProxyURLOverride", "dataVolumeTTLSeconds", "HTTPProxy", "HTTPSProxy", "noProxy", "trustedCAProxy"]
    {
        assert!(json.contains(&format!("\"{key}\"")), "{key} missing in {json}");
    }
}
