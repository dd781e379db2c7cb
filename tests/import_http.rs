//! HTTP sources: Range vs no Range, redirects, basic auth, TLS, extra headers, checksums, and misbehaving
//! servers (503s, resets, stalls, lying Content-Length, HEAD refused, text/html, requests never answered: also for
//! the S3 and registry sources).
//!
//! Needs `tests/infra/import-env.sh up`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::time::Duration;

use integration_tests::messages as msg;
use integration_tests::server::{Behavior, Silence, TestServer};
use integration_tests::*;
// The failing import of these tests is the shared one.
use integration_tests::import_fails as fail;

/// Imports `source` (expected to produce corpus entry `name`) with extra args; asserts success and content.
fn ok(test: &str, name: &str, source: &str, extra: &[&str]) -> Output {
    import_ok(test, name, source, |c| c.args(extra))
}

// ----- Range / no Range --------------------------------------------------------------------------------------------

fn norange_url(name: &str) -> String {
    format!("{}/corpus/{name}", env().http_norange)
}

#[test]
fn norange_raw() {
    ok("http-norange-raw", "base.raw", &norange_url("base.raw"), &[]);
}

#[test]
fn norange_raw_xz() {
    ok("http-norange-raw-xz", "base-xzmb.raw.xz", &norange_url("base-xzmb.raw.xz"), &[]);
}

#[test]
fn norange_compressed_qcow2() {
    ok("http-norange-qcow2-gz", "q2-v3.qcow2.gz", &norange_url("q2-v3.qcow2.gz"), &[]);
}

#[test]
fn norange_qcow2_with_scratch() {
    let out = OutDir::new("http-norange-qcow2-scratch");
    let scratch = out.join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    for name in ["q2-reverse.qcow2", "q2-snap.qcow2", "vhdx-dyn.vhdx", "vmdk-stream.vmdk"] {
        let e = entry(name);
        let dest = out.join(&format!("{name}.img"));
        let run = Cmd::import(norange_url(name), &dest).arg("--scratch").arg(&scratch).run();
        assert_success(&run);
        assert_image_eq(&dest, e, None);
        assert_sparse(&dest, e);
        let left: Vec<_> = fs::read_dir(&scratch).unwrap().flatten().map(|d| d.path()).collect();
        assert!(left.is_empty(), "{name}: files left in the scratch dir: {left:?}");
    }
}

/// Without Range and without --scratch the importer may stream the qcow2 or ask for --scratch; nothing else.
#[test]
fn norange_qcow2_without_scratch() {
    let e = entry("q2-reverse.qcow2");
    let out = OutDir::new("http-norange-qcow2-noscratch");
    let dest = out.join("disk.img");
    let run = Cmd::import(norange_url(&e.name), &dest).run();
    if run.success() {
        assert_image_eq(&dest, e, None);
    } else {
        assert_failed(&run, &dest, msg::NEEDS_SCRATCH);
    }
}

#[test]
fn range_source_leaves_scratch_empty() {
    let e = entry("q2-zlib.qcow2");
    let out = OutDir::new("http-range-scratch");
    let scratch = out.join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    let dest = out.join("disk.img");
    let run = Cmd::import(e.url(), &dest).arg("--scratch").arg(&scratch).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    assert_eq!(fs::read_dir(&scratch).unwrap().count(), 0, "files left in the scratch dir");
}

// ----- redirects -----------------------------------------------------------------------------------------------------

#[test]
fn redirect_one_hop() {
    let url = format!("{}/r1/corpus/q2-v3.qcow2", env().http_redirect);
    ok("http-redirect-1", "q2-v3.qcow2", &url, &[]);
}

#[test]
fn redirect_two_hops() {
    let url = format!("{}/r2/corpus/base.raw.zst", env().http_redirect);
    ok("http-redirect-2", "base.raw.zst", &url, &[]);
}

#[test]
fn redirect_301() {
    let url = format!("{}/r301/corpus/q2-zstd.qcow2", env().http_redirect);
    ok("http-redirect-301", "q2-zstd.qcow2", &url, &[]);
}

#[test]
fn redirect_loop_fails() {
    let url = format!("{}/loop/start", env().http_redirect);
    fail("http-redirect-loop", &url, |c| c, msg::REDIRECTS);
}

// ----- basic auth ----------------------------------------------------------------------------------------------------

fn auth_url(name: &str) -> String {
    format!("{}/corpus/{name}", env().http_auth)
}

#[test]
fn auth_good_credentials() {
    let e = entry("q2-v3.qcow2");
    let out = OutDir::new("http-auth-good");
    let dest = out.join("disk.img");
    let run = Cmd::import(auth_url(&e.name), &dest).auth(&env().auth_user, &env().auth_password).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
}

#[test]
fn auth_good_credentials_compressed() {
    let e = entry("base.raw.bz2");
    let out = OutDir::new("http-auth-good-bz2");
    let dest = out.join("disk.img");
    let run = Cmd::import(auth_url(&e.name), &dest).auth(&env().auth_user, &env().auth_password).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
}

#[test]
fn auth_missing_credentials() {
    fail("http-auth-missing", &auth_url("q2-v3.qcow2"), |c| c, msg::HTTP_401);
}

#[test]
fn auth_bad_password() {
    fail("http-auth-bad", &auth_url("q2-v3.qcow2"), |c| c.auth(&env().auth_user, "wrong-password"), msg::HTTP_401);
}

/// Credentials are sent again after a same-origin redirect.
#[test]
fn auth_survives_same_origin_redirect() {
    let e = entry("base.raw.gz");
    let out = OutDir::new("http-auth-redirect");
    let dest = out.join("disk.img");
    let url = format!("{}/redir/corpus/{}", env().http_auth, e.name);
    let run = Cmd::import(url, &dest).auth(&env().auth_user, &env().auth_password).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
}

// ----- TLS -------------------------------------------------------------------------------------------------------------

fn https_url(name: &str) -> String {
    format!("{}/corpus/{name}", env().https)
}

#[test]
fn tls_with_cert_dir() {
    let ca = env().ca_dir.to_str().unwrap().to_owned();
    ok("http-tls-certdir", "q2-v3.qcow2", &https_url("q2-v3.qcow2"), &["--cert-dir", &ca]);
}

#[test]
fn tls_with_cert_dir_compressed() {
    let ca = env().ca_dir.to_str().unwrap().to_owned();
    ok("http-tls-certdir-xz", "q2-v3.qcow2.xz", &https_url("q2-v3.qcow2.xz"), &["--cert-dir", &ca]);
}

#[test]
fn tls_without_ca_fails() {
    fail("http-tls-noca", &https_url("q2-v3.qcow2"), |c| c, msg::TLS_CERTIFICATE);
}

#[test]
fn tls_with_wrong_ca_fails() {
    let other = env().other_ca_dir.clone();
    fail("http-tls-wrongca", &https_url("q2-v3.qcow2"), |c| c.arg("--cert-dir").arg(other), msg::TLS_CERTIFICATE);
}

/// Every file in --cert-dir is a CA: an unrelated CA next to the right one must not hurt.
#[test]
fn tls_cert_dir_with_several_cas() {
    let out = OutDir::new("http-tls-several-cas");
    let dir = out.join("cas");
    fs::create_dir_all(&dir).unwrap();
    fs::copy(env().other_ca_dir.join("ca.crt"), dir.join("a-other.crt")).unwrap();
    fs::copy(env().ca_dir.join("ca.crt"), dir.join("b-test.pem")).unwrap();
    let e = entry("base.raw.zst");
    let dest = out.join("disk.img");
    let run = Cmd::import(https_url(&e.name), &dest).arg("--cert-dir").arg(&dir).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
}

#[test]
fn tls_insecure() {
    ok("http-tls-insecure", "q2-v3.qcow2", &https_url("q2-v3.qcow2"), &["--insecure"]);
}

// ----- headers, status codes, content types ------------------------------------------------------------------------

#[test]
fn extra_header_is_sent() {
    let url = format!("{}/hdr/base.raw.gz", env().http_plain);
    ok("http-header", "base.raw.gz", &url, &["--header", "X-Test: yes"]);
}

#[test]
fn missing_required_header_gives_403() {
    let url = format!("{}/hdr/base.raw.gz", env().http_plain);
    fail("http-header-missing", &url, |c| c, msg::HTTP_403);
}

#[test]
fn several_headers_reach_the_server() {
    let token = unique_token("hdrs");
    let url = format!("{}/hdr/tiny.raw.gz?t={token}", env().http_plain);
    ok("http-headers-log", "tiny.raw.gz", &url, &["--header", "X-Test: yes", "--header", "X-Other: second"]);
    let lines = access_log_lines(&token);
    assert!(!lines.is_empty(), "no access-log line for {token}");
    for l in &lines {
        assert!(l.contains("xtest=\"yes\"") && l.contains("xother=\"second\""), "headers missing in: {l}");
    }
}

#[test]
fn not_found_gives_404() {
    let url = env().plain_url("no-such-image.qcow2");
    fail("http-404", &url, |c| c, msg::HTTP_404);
}

#[test]
fn head_refused_get_works() {
    let url = format!("{}/nohead/q2-v3.qcow2", env().http_plain);
    ok("http-nohead-qcow2", "q2-v3.qcow2", &url, &[]);
    let url = format!("{}/nohead/base.raw.xz", env().http_plain);
    ok("http-nohead-xz", "base.raw.xz", &url, &[]);
}

#[test]
fn text_html_content_type_is_only_a_warning() {
    let url = format!("{}/html/q2-v3.qcow2", env().http_plain);
    ok("http-html", "q2-v3.qcow2", &url, &[]);
}

#[test]
fn rate_limited_with_progress_and_json() {
    let e = entry("tiny.raw.gz");
    let out = OutDir::new("http-slow-progress");
    let dest = out.join("disk.img");
    let url = format!("{}/slow/{}", env().http_plain, e.name);
    let run = Cmd::import_with_progress(url, &dest).json().run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    check_import_json(&run, e, None);
}

#[test]
fn json_line_shape() {
    let e = entry("q2-v3.qcow2.xz");
    let out = OutDir::new("http-json");
    let dest = out.join("disk.img");
    let sha = file_digest("sha256", &e.path);
    let run = Cmd::import(e.url(), &dest).json().args(["--checksum", &format!("sha256:{sha}")]).run();
    assert_success(&run);
    let lines: Vec<&str> = run.stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stdout must be exactly one JSON line with --no-progress\n{}", run.describe());
    let j = check_import_json(&run, e, Some(&sha));
    assert!(j.is_object(), "not a JSON object: {j}");
    assert_eq!(j["bytes_read"].as_u64(), Some(e.file_len()), "bytes_read of a streamed xz file\n{}", run.describe());
}

// ----- checksums -----------------------------------------------------------------------------------------------------

fn checksum_ok(test: &str, name: &str, source: &str, algo: &str) {
    checksum_ok_with(test, name, source, algo, false);
}

/// `scratch`: also pass `--scratch DIR` (the checksum must cover the spooled bytes too).
fn checksum_ok_with(test: &str, name: &str, source: &str, algo: &str, scratch: bool) {
    let e = entry(name);
    let digest = file_digest(algo, &e.path);
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let mut cmd = Cmd::import(source, &dest).json().args(["--checksum", &format!("{algo}:{digest}")]);
    if scratch {
        let dir = out.join("scratch");
        fs::create_dir_all(&dir).unwrap();
        cmd = cmd.arg("--scratch").arg(dir);
    }
    let run = cmd.run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    check_import_json(&run, e, Some(&digest));
}

#[test]
fn checksum_md5() {
    let e = entry("base.raw.gz");
    checksum_ok("http-checksum-md5", &e.name, &e.url(), "md5");
}

#[test]
fn checksum_sha1() {
    let e = entry("base-multi.raw.zst");
    checksum_ok("http-checksum-sha1", &e.name, &e.url(), "sha1");
}

#[test]
fn checksum_sha256() {
    let e = entry("q2-v3.qcow2.zst");
    checksum_ok("http-checksum-sha256", &e.name, &e.url(), "sha256");
}

#[test]
fn checksum_sha512() {
    let e = entry("q2-zstd.qcow2");
    checksum_ok("http-checksum-sha512", &e.name, &e.url(), "sha512");
}

/// A compressed vhdx is spooled to scratch and read natively from there; the checksum covers the source as it
/// streamed (before decompression and spooling).
#[test]
fn checksum_with_scratch_spooled_vhdx() {
    let e = entry("vhdx-dyn.vhdx.zst");
    checksum_ok_with("http-checksum-scratch", &e.name, &e.url(), "sha256", true);
}

/// A compressed streamOptimized vmdk converts natively in the one pass that hashes it.
#[test]
fn checksum_streamed_vmdk() {
    let e = entry("vmdk-stream.vmdk.xz");
    checksum_ok_with("http-checksum-vmdk", &e.name, &e.url(), "sha256", true);
}

/// An uncompressed qcow2 may be read with Range requests; the checksum still covers the whole file.
#[test]
fn checksum_qcow2_with_range_reads() {
    let e = entry("q2-reverse.qcow2");
    checksum_ok("http-checksum-qcow2", &e.name, &e.url(), "sha256");
}

#[test]
fn checksum_without_range_support() {
    let e = entry("base.raw.xz");
    checksum_ok("http-checksum-norange", &e.name, &norange_url(&e.name), "sha256");
}

#[test]
fn checksum_local_file() {
    let e = entry("q2-zlib.qcow2");
    checksum_ok("http-checksum-local", &e.name, e.path.to_str().unwrap(), "sha1");
}

fn checksum_mismatch(test: &str, name: &str, algo: &str) {
    let e = entry(name);
    let actual = file_digest(algo, &e.path);
    // a well-formed digest of something else
    let wrong = file_digest(algo, &entry("tiny.raw").path);
    let run = fail(test, &e.url(), |c| c.args(["--checksum", &format!("{algo}:{wrong}")]), &["checksum mismatch"]);
    let want = msg::checksum_mismatch(algo, &wrong, &actual);
    assert!(run.stderr.contains(&want), "stderr should contain `{want}`\n{}", run.describe());
}

#[test]
fn checksum_mismatch_sha256() {
    checksum_mismatch("http-checksum-mismatch-sha256", "base.raw.gz", "sha256");
}

#[test]
fn checksum_mismatch_md5_qcow2() {
    checksum_mismatch("http-checksum-mismatch-md5", "q2-v3.qcow2", "md5");
}

#[test]
fn checksum_malformed_argument() {
    let e = entry("tiny.raw.gz");
    for bad in ["sha256:xyz", "crc32:0000", "sha256", "md5:0123"] {
        let run = fail(
            &format!("http-checksum-bad-{}", bad.replace(':', "_")),
            &e.url(),
            |c| c.args(["--checksum", bad]),
            &[],
        );
        let low = run.stderr.to_lowercase();
        assert!(
            msg::BAD_CHECKSUM_ARG.iter().any(|m| low.contains(m)),
            "--checksum {bad}: the error should mention {:?}\n{}",
            msg::BAD_CHECKSUM_ARG,
            run.describe()
        );
    }
}

// ----- misbehaving servers ---------------------------------------------------------------------------------------------

#[test]
fn flaky_503_then_ok() {
    let e = entry("base.raw.gz");
    let srv = TestServer::start(&e.path, Behavior::Flaky503 { failures: 2 });
    let out = OutDir::new("http-flaky-503");
    let dest = out.join("disk.img");
    let run = Cmd::import(srv.url(), &dest).timeout(Duration::from_secs(120)).run();
    assert!(run.success(), "importer should retry 503s\nserver log:\n{}\n{}", srv.log(), run.describe());
    assert_image_eq(&dest, e, None);
    assert_eq!(srv.faults(), 2, "server log:\n{}", srv.log());
}

/// Two faults after 55% of a response body. `close`: a clean close short of Content-Length (every written byte
/// arrives, so an importer that restarts from 0 needs > 2x the file, resuming with Range about 1x); else a TCP
/// reset (bytes in flight are lost, so only the request log can tell a resume from a restart).
fn fault_resumes(test: &str, name: &str, close: bool) {
    let e = entry(name);
    let len = e.file_len();
    let (bytes, times) = (len * 55 / 100, 2);
    let behavior = if close { Behavior::CloseAfter { bytes, times } } else { Behavior::ResetAfter { bytes, times } };
    let srv = TestServer::start(&e.path, behavior);
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let sha = file_digest("sha256", &e.path);
    let run = Cmd::import(srv.url(), &dest)
        .args(["--checksum", &format!("sha256:{sha}")])
        .timeout(Duration::from_secs(120))
        .run();
    assert!(
        run.success(),
        "importer should resume after a broken connection\nserver log:\n{}\n{}",
        srv.log(),
        run.describe()
    );
    assert_image_eq(&dest, e, None);
    assert!(srv.faults() >= 1, "the server never broke a connection\n{}", srv.log());
    assert_eq!(srv.restarts(), 0, "the download restarted from byte 0 instead of resuming with Range\n{}", srv.log());
    if close {
        let served = srv.body_bytes();
        assert!(
            served < 2 * len,
            "{served} body bytes served for a {len}-byte file: the download restarted instead of resuming\n{}",
            srv.log()
        );
    }
}

fn reset_resumes(test: &str, name: &str) {
    fault_resumes(test, name, false);
}

#[test]
fn closed_mid_body_resumes_raw() {
    fault_resumes("http-close-raw", "base.raw", true);
}

#[test]
fn closed_mid_body_resumes_gz() {
    fault_resumes("http-close-gz", "base.raw.gz", true);
}

#[test]
fn closed_mid_body_resumes_qcow2() {
    fault_resumes("http-close-qcow2", "q2-snap.qcow2", true);
}

#[test]
fn reset_mid_body_resumes_raw() {
    reset_resumes("http-reset-raw", "base.raw");
}

#[test]
fn reset_mid_body_resumes_xz() {
    reset_resumes("http-reset-xz", "base-xzmb.raw.xz");
}

#[test]
fn reset_mid_body_resumes_qcow2() {
    reset_resumes("http-reset-qcow2", "q2-reverse.qcow2");
}

#[test]
fn stall_once_resumes() {
    let e = entry("base.raw.gz");
    let len = e.file_len();
    let srv = TestServer::start(
        &e.path,
        Behavior::StallAt { offset: len * 40 / 100, stall: Duration::from_secs(60), times: 1 },
    );
    let out = OutDir::new("http-stall-once");
    let dest = out.join("disk.img");
    let run = Cmd::import(srv.url(), &dest).args(["--stall-timeout", "2"]).timeout(Duration::from_secs(45)).run();
    assert!(run.success(), "importer should retry a stalled download\nserver log:\n{}\n{}", srv.log(), run.describe());
    assert_image_eq(&dest, e, None);
    assert_eq!(srv.faults(), 1);
    assert!(run.elapsed < Duration::from_secs(30), "took {:?} to get past a 2 s stall", run.elapsed);
}

#[test]
fn stall_forever_fails() {
    let e = entry("base.raw");
    let srv = TestServer::start(
        &e.path,
        Behavior::StallAt { offset: 3 * MIB, stall: Duration::from_secs(300), times: usize::MAX },
    );
    let out = OutDir::new("http-stall-forever");
    let dest = out.join("disk.img");
    let run = Cmd::import(srv.url(), &dest).args(["--stall-timeout", "2"]).timeout(Duration::from_secs(120)).run();
    assert!(
        !run.success(),
        "a download that never gets past offset 3 MiB must fail\nserver log:\n{}\n{}",
        srv.log(),
        run.describe()
    );
    assert_failed_with(&run, Some(&dest), msg::STALLED, false);
}

fn short_body_fails(test: &str, name: &str) {
    let e = entry(name);
    let srv = TestServer::start(&e.path, Behavior::ShortBody { missing: 1000 });
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let run = Cmd::import(srv.url(), &dest).timeout(Duration::from_secs(120)).run();
    assert_failed_with(&run, Some(&dest), msg::SHORT_BODY, false);
}

#[test]
fn short_body_fails_raw() {
    short_body_fails("http-short-raw", "base.raw");
}

#[test]
fn short_body_fails_gz() {
    short_body_fails("http-short-gz", "base.raw.gz");
}

#[test]
fn short_body_fails_qcow2() {
    short_body_fails("http-short-qcow2", "q2-v3.qcow2");
}

#[test]
fn test_server_serves_ranges() {
    // the harness itself: a well-behaved TestServer must work for the importer too
    let e = entry("q2-snap.qcow2");
    let srv = TestServer::start(&e.path, Behavior::Normal);
    ok("http-testserver-normal", "q2-snap.qcow2", &srv.url(), &[]);
    assert!(srv.requests() >= 1);
}

// ----- servers that accept and never answer ----------------------------------------------------------------------
// Every wait on the network (connect, response headers, body) is bounded by --stall-timeout and retried like a
// stalled body (--retries); a server that never sends a status line must not hang the import.

/// Stall timeout and retries of the silent-server runs (small: each wait costs one stall timeout).
const SILENT_ARGS: [&str; 4] = ["--stall-timeout", "1", "--retries", "2"];

/// Runs `importer import SOURCE [ARGS]` (from `source`) against a server silent for `which` and checks the
/// failure contract: a timeout named on the last line, bounded time, DEST gone.
fn silent_fails(
    test: &str,
    file: &std::path::Path,
    which: Silence,
    source: impl FnOnce(&TestServer) -> (String, Vec<String>),
) -> TestServer {
    let srv = TestServer::start(file, Behavior::Silent { which });
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let (source, args) = source(&srv);
    let run = Cmd::import(source, &dest).args(args).args(SILENT_ARGS).timeout(Duration::from_secs(120)).run();
    assert_failed_with(&run, Some(&dest), msg::STALLED, false);
    assert!(
        run.elapsed < Duration::from_secs(60),
        "took {:?} against a silent server\n{}",
        run.elapsed,
        run.describe()
    );
    assert!(srv.faults() >= 1, "the server answered everything\n{}", srv.log());
    srv
}

/// Accepts, never answers HEAD nor GET: the HEAD (tolerated when it fails) and every GET attempt time out.
#[test]
fn no_response_headers_fails() {
    let srv = silent_fails("http-silent-all", &entry("base.raw.gz").path, Silence::All, |srv| (srv.url(), Vec::new()));
    // one HEAD, then the GET and its 2 retries, as for a stalled body
    assert_eq!(srv.requests(), 4, "connections seen:\n{}", srv.log());
}

/// HEAD is answered, the GET never is.
#[test]
fn no_response_to_get_fails() {
    let srv = silent_fails("http-silent-get", &entry("base.raw.gz").path, Silence::Get, |srv| (srv.url(), Vec::new()));
    assert_eq!(srv.requests(), 4, "requests seen:\n{}", srv.log());
    assert!(srv.log().starts_with("HEAD "), "{}", srv.log());
}

/// The stream is served, the ranged reads a qcow2 needs for out-of-order data never are. The image has its L1
/// table moved to the end of the file, so every data cluster streams past before it is mapped and is read again
/// with Range (checked first against a well-behaved server).
#[test]
fn no_response_to_ranged_get_fails() {
    use integration_tests::hostile::{self as h, off};
    let dir = OutDir::new("http-silent-range-src");
    let f = h::copy_to(&entry("q2-v3.qcow2").path, dir.path(), "l1-at-end.qcow2");
    let hd = h::Qcow2Header::read(&f);
    let l1 = h::read_bytes(&f, hd.l1_table_offset, hd.l1_size as usize * 8);
    let at = file_len(&f).div_ceil(hd.cluster_size()) * hd.cluster_size();
    h::patch(&f, at, &l1);
    h::set_be64(&f, off::L1_TABLE_OFFSET, at);
    let good = TestServer::start(&f, Behavior::Normal);
    let out = OutDir::new("http-silent-range-control");
    let dest = out.join("disk.img");
    assert_success(&Cmd::import(good.url(), &dest).run());
    assert_matches_qemu(&dest, &f, out.path());
    assert!(good.log().contains("range=Some"), "the control import made no ranged request:\n{}", good.log());
    let srv = silent_fails("http-silent-range", &f, Silence::Ranged, |srv| (srv.url(), Vec::new()));
    assert!(srv.log().contains("range=Some"), "no ranged request was made:\n{}", srv.log());
}

/// `importer info` waits no longer than `import`.
#[test]
fn info_no_response_fails() {
    let srv = TestServer::start(&entry("base.raw.gz").path, Behavior::Silent { which: Silence::All });
    let run = Cmd::info(srv.url()).args(SILENT_ARGS).timeout(Duration::from_secs(120)).run();
    assert_failed_with(&run, None, msg::STALLED, false);
    assert!(run.elapsed < Duration::from_secs(60), "took {:?}\n{}", run.elapsed, run.describe());
}

/// An S3 endpoint that accepts and never answers: HEAD and GET time out (the SDK retries them).
#[test]
fn s3_no_response_fails() {
    silent_fails("s3-silent", &entry("base.raw.gz").path, Silence::All, |srv| {
        ("s3://bucket/disk.img".into(), vec!["--s3-endpoint".into(), format!("http://{}", srv.addr)])
    });
}

/// A registry that accepts and never answers (not even the TLS handshake).
#[test]
fn registry_no_response_fails() {
    silent_fails("registry-silent", &entry("base.raw.gz").path, Silence::All, |srv| {
        (format!("docker://{}/disk:latest", srv.addr), Vec::new())
    });
}
