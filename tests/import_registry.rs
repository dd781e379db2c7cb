//! Registry sources (`docker://`) against real docker-registry instances: layer compressions, disk formats,
//! manifest lists, image env, whiteouts, layout errors, bootc refusal, htpasswd + TLS auth.
//!
//! Needs `tests/infra/import-env.sh up` (corpus) and `tests/infra/registry-env.sh up` (registries and images,
//! described in that script). Fails, never skips, when `tests/work/registry-env` is missing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::OnceLock;

use integration_tests::*;
// The failing import of these tests is the shared one.
use integration_tests::import_fails as fail;

const SETUP_HINT: &str = "run `tests/infra/import-env.sh up` and then `tests/infra/registry-env.sh up`";

/// Error wording expected on the final stderr line (case-insensitive substrings, any one matches).
mod msg {
    pub const PULL: &[&str] = &["failed to pull image"];
    pub const MORE_THAN_ONE: &[&str] = &["image directory contains more than one file"];
    pub const NO_DISK: &[&str] = &["Failed to find VM disk image file in the container image"];
    pub const MALFORMED: &[&str] = &["is malformed"];
    pub const BOOTC: &[&str] = &["bootc image detected"];
    pub const NOT_AUTHORIZED: &[&str] = &["not authorized", "unauthorized", "401"];
    pub const CERTIFICATE: &[&str] = &["certificate", "UnknownIssuer"];
    pub const NO_PLATFORM: &[&str] = &["no image for platform linux/s390x"];
    pub const ARCH_MISMATCH: &[&str] = &["doesn't match requested architecture"];
}

/// Settings written by `tests/infra/registry-env.sh up`.
struct Registries {
    plain: String,
    tls: String,
    ca_dir: PathBuf,
    other_ca_dir: PathBuf,
    user: String,
    password: String,
}

fn registries() -> &'static Registries {
    static R: OnceLock<Registries> = OnceLock::new();
    R.get_or_init(|| {
        let s = Settings::read("registry-env", SETUP_HINT);
        let get = |k: &str| s.get(k);
        let r = Registries {
            plain: get("REGISTRY_PLAIN"),
            tls: get("REGISTRY_TLS"),
            ca_dir: get("REGISTRY_CA_DIR").into(),
            other_ca_dir: get("REGISTRY_OTHER_CA_DIR").into(),
            user: get("REGISTRY_USER"),
            password: get("REGISTRY_PASSWORD"),
        };
        for hp in [&r.plain, &r.tls] {
            if TcpStream::connect(hp.as_str()).is_err() {
                panic!("no registry listening on {hp}\n==> {SETUP_HINT}");
            }
        }
        r
    })
}

fn plain(image: &str) -> String {
    format!("docker://{}/test/{image}:v1", registries().plain)
}

fn tls(image: &str) -> String {
    format!("docker://{}/test/{image}:v1", registries().tls)
}

/// Imports `source` with `extra` args (JSON output), expects corpus entry `name`'s content; returns the JSON.
fn ok(test: &str, name: &str, source: &str, cmd: impl FnOnce(Cmd) -> Cmd) -> serde_json::Value {
    let run = import_ok(test, name, source, |c| cmd(c.json()));
    check_import_json(&run, entry(name), None)
}

/// Imports `source` from the plain registry (`--insecure`).
fn ok_plain(test: &str, name: &str, image: &str) -> serde_json::Value {
    ok(test, name, &plain(image), |c| c.arg("--insecure"))
}

fn last_line(o: &Output) -> String {
    o.stderr_lines().last().copied().unwrap_or_default().to_owned()
}

// ----- disk formats and layer compressions -------------------------------------------------------------------------

#[test]
fn raw_disk_gzip_layer() {
    ok_plain("reg_raw", "base.raw", "raw");
}

#[test]
fn qcow2_disk() {
    ok_plain("reg_qcow2", "q2-v3.qcow2", "qcow2");
}

#[test]
fn zstd_layer() {
    ok_plain("reg_zstd", "base.raw", "zstd");
}

#[test]
fn uncompressed_layer() {
    ok_plain("reg_plain", "base.raw", "plain");
}

#[test]
fn gzipped_disk_file() {
    ok_plain("reg_diskgz", "base.raw.gz", "diskgz");
}

#[test]
fn docker_v2s2_manifest() {
    ok_plain("reg_v2s2", "base.raw", "v2s2");
}

#[test]
fn disk_below_an_unrelated_layer() {
    ok_plain("reg_layered", "base.raw", "layered");
}

#[test]
fn whiteout_replaces_lower_disk() {
    // layer 1: disk/old.img (small.raw); layer 2: disk/.wh.old.img + disk/new.img (base.raw)
    ok_plain("reg_whiteout", "base.raw", "whiteout");
}

// ----- manifest lists ----------------------------------------------------------------------------------------------

#[test]
fn manifest_list_amd64() {
    ok("reg_multi_amd64", "base.raw", &plain("multi"), |c| c.args(["--insecure", "--architecture", "amd64"]));
}

#[test]
fn manifest_list_arm64() {
    ok("reg_multi_arm64", "small.raw", &plain("multi"), |c| c.args(["--insecure", "--architecture", "arm64"]));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn manifest_list_default_architecture() {
    ok_plain("reg_multi_default", "base.raw", "multi");
}

#[test]
fn manifest_list_missing_architecture() {
    let run =
        fail("reg_multi_s390x", &plain("multi"), |c| c.args(["--insecure", "--architecture", "s390x"]), msg::PULL);
    let l = last_line(&run);
    assert!(msg::NO_PLATFORM.iter().any(|m| l.contains(m)), "{}", run.describe());
    assert!(l.contains("linux/amd64") && l.contains("linux/arm64"), "available platforms listed\n{}", run.describe());
}

#[test]
fn requested_architecture_checked_against_config() {
    fail("reg_arch_mismatch", &plain("raw"), |c| c.args(["--insecure", "--architecture", "arm64"]), msg::ARCH_MISMATCH);
}

// ----- image env ---------------------------------------------------------------------------------------------------

#[test]
fn image_env_reported() {
    let j = ok_plain("reg_env", "base.raw", "env");
    let env: Vec<&str> =
        j["image_env"].as_array().map(|a| a.iter().filter_map(|v| v.as_str()).collect()).unwrap_or_default();
    assert!(env.contains(&"INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small"), "image_env: {}", j["image_env"]);
}

// ----- layout errors -----------------------------------------------------------------------------------------------

#[test]
fn two_files_under_disk() {
    fail("reg_twofiles", &plain("twofiles"), |c| c.arg("--insecure"), msg::MORE_THAN_ONE);
}

#[test]
fn two_qcow2_files_under_disk() {
    // The first qcow2 is streamed (and converted) before the second file is seen: the violation must still fail
    // the import and remove DEST.
    fail("reg_twoqcow2", &plain("twoqcow2"), |c| c.arg("--insecure"), msg::MORE_THAN_ONE);
}

#[test]
fn no_disk_file() {
    fail("reg_nodisk", &plain("nodisk"), |c| c.arg("--insecure"), msg::NO_DISK);
}

#[test]
fn malformed_layer() {
    fail("reg_malformed", &plain("malformed"), |c| c.arg("--insecure"), msg::MALFORMED);
}

#[test]
fn bootc_image_refused() {
    fail("reg_bootc", &plain("bootc"), |c| c.arg("--insecure"), msg::BOOTC);
}

#[test]
fn missing_tag() {
    fail("reg_missing", &plain("does-not-exist"), |c| c.arg("--insecure"), msg::PULL);
}

#[test]
fn plain_registry_needs_insecure() {
    fail("reg_plain_secure", &plain("raw"), |c| c, msg::PULL);
}

// ----- htpasswd + TLS registry -------------------------------------------------------------------------------------

#[test]
fn auth_registry_with_credentials_and_ca() {
    let r = registries();
    ok("reg_auth_ok", "q2-v3.qcow2", &tls("qcow2"), |c| c.auth(&r.user, &r.password).arg("--cert-dir").arg(&r.ca_dir));
}

#[test]
fn auth_registry_insecure_without_ca() {
    let r = registries();
    ok("reg_auth_insecure", "base.raw", &tls("raw"), |c| c.auth(&r.user, &r.password).arg("--insecure"));
}

#[test]
fn auth_registry_wrong_password() {
    let r = registries();
    let run = fail(
        "reg_auth_wrong",
        &tls("qcow2"),
        |c| c.auth(&r.user, "wrong-password").arg("--cert-dir").arg(&r.ca_dir),
        msg::PULL,
    );
    let l = last_line(&run).to_lowercase();
    assert!(msg::NOT_AUTHORIZED.iter().any(|m| l.contains(m)), "{}", run.describe());
    assert!(!run.stderr.contains("wrong-password"), "the password must not be printed\n{}", run.describe());
}

#[test]
fn auth_registry_without_credentials() {
    let r = registries();
    let run = fail("reg_auth_none", &tls("qcow2"), |c| c.arg("--cert-dir").arg(&r.ca_dir), msg::PULL);
    let l = last_line(&run).to_lowercase();
    assert!(msg::NOT_AUTHORIZED.iter().any(|m| l.contains(m)), "{}", run.describe());
}

#[test]
fn auth_registry_untrusted_certificate() {
    let r = registries();
    for (test, dir) in [("reg_tls_noca", None), ("reg_tls_otherca", Some(&r.other_ca_dir))] {
        let run = fail(
            test,
            &tls("qcow2"),
            |c| {
                let c = c.auth(&r.user, &r.password);
                match dir {
                    Some(d) => c.arg("--cert-dir").arg(d),
                    None => c,
                }
            },
            msg::PULL,
        );
        let l = last_line(&run);
        assert!(msg::CERTIFICATE.iter().any(|m| l.contains(m)), "{}", run.describe());
    }
}

// ----- info --------------------------------------------------------------------------------------------------------

#[test]
fn info_over_registry() {
    let run = Cmd::info(plain("qcow2")).arg("--insecure").run();
    check_info_json(&run, entry("q2-v3.qcow2"));
}
