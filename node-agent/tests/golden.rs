//! Golden tests of the VMI → domain XML converter: upstream's example VMIs (`../shared/upstream-examples/kubevirt/`)
//! after the mutating webhook's defaults, written by hand as `tests/golden/<name>.vmi.yaml`, convert to exactly
//! `tests/golden/<name>.xml` (textual: the writer is deterministic; a mismatch prints a line diff). After an
//! intended change, `UPDATE_GOLDEN=1 cargo test -p node-agent --test golden` rewrites the XML files; review the
//! diff.
//!
//! The reference domain of the launcher image (`deploy/launcher/domain-reference.xml`, booted by
//! `tests/guest/check.sh`) is compared semantically with the conversion of the VMI it describes
//! (`tests/golden/reference.vmi.yaml`): both parsed, comments and whitespace dropped, attributes sorted; the
//! reference's own file layout mapped to the launcher contract's paths first (listed in [`reference_paths`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use contracts::kubevirt::launcher;
use crds::kubevirt::VirtualMachineInstance;
use node_agent::domain_xml::{Acceleration, ConvertContext, ImageFormat, PvcVolumeMode, to_domain_xml};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture(name: &str) -> VirtualMachineInstance {
    let path = golden_dir().join(format!("{name}.vmi.yaml"));
    serde_saphyr::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The context the node agent would build for these VMIs on the test cluster: software emulation, the
/// containerDisks are qcow2 (the test guest's), the pod interface's MTU 1500.
fn emulation() -> ConvertContext {
    ConvertContext::new(Acceleration::Emulation)
        .with_container_disk_format("containerdisk", ImageFormat::Qcow2)
        .with_pod_interface_mtu(1500)
}

/// A line diff (longest common subsequence), `-` expected, `+` actual, with two lines of context.
fn line_diff(want: &str, got: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near_change = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|(c, _)| *c != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near_change(k) {
            let _ = writeln!(out, "{c} {line}");
            skipped = false;
        } else if !skipped {
            out.push_str("  …\n");
            skipped = true;
        }
    }
    out
}

fn check_golden(name: &str, ctx: &ConvertContext, vmi: &VirtualMachineInstance) -> Option<String> {
    let got = to_domain_xml(vmi, ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
    let path = golden_dir().join(format!("{name}.xml"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return None;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    (want != got).then(|| format!("--- {} (- golden, + converted)\n{}", path.display(), line_diff(&want, &got)))
}

#[test]
fn upstream_examples_convert_to_their_golden_xml() {
    let pvc_fs = emulation().with_pvc_mode("pvcdisk", PvcVolumeMode::Filesystem);
    let pvc_block = emulation().with_pvc_mode("pvcdisk", PvcVolumeMode::Block);
    let cases: Vec<(&str, &str, ConvertContext)> = vec![
        ("vmi-ephemeral", "vmi-ephemeral", emulation()),
        ("vmi-sata", "vmi-sata", emulation()),
        ("vmi-nocloud", "vmi-nocloud", emulation()),
        ("vmi-pvc", "vmi-pvc", pvc_fs),
        ("vmi-pvc-block", "vmi-pvc", pvc_block),
        ("vmi-masquerade", "vmi-masquerade", emulation()),
        ("vmi-migratable", "vmi-migratable", emulation()),
        ("vmi-ephemeral-kvm", "vmi-ephemeral", ConvertContext { acceleration: Acceleration::Kvm, ..emulation() }),
        ("reference", "reference", emulation()),
    ];
    let failures: Vec<String> =
        cases.iter().filter_map(|(golden, vmi, ctx)| check_golden(golden, ctx, &fixture(vmi))).collect();
    assert!(failures.is_empty(), "{} golden file(s) differ:\n{}", failures.len(), failures.join("\n"));
}

/// How the reference lays out its files (its header comment) → the launcher contract's paths, which the
/// converter uses. Everything else must match as it is.
fn reference_paths() -> Vec<(String, String)> {
    let uid_dir = "/var/run/kubevirt-private/6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7";
    vec![
        ("/var/run/kubevirt/container-disks/disk_0.img".into(), launcher::container_disk_copy("containerdisk")),
        (
            "/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi/noCloud.iso".into(),
            launcher::cloud_init_disk("cloudinitdisk"),
        ),
        // The log first: the socket's path is a prefix of it.
        (format!("{uid_dir}/virt-serial0-log"), launcher::serial_log()),
        (format!("{uid_dir}/virt-serial0"), launcher::SocketDir::in_pod().serial_console()),
        (format!("{uid_dir}/virt-vnc"), launcher::SocketDir::in_pod().vnc()),
    ]
}

/// One line per element (`path/name attr=value …`, attributes sorted) and per text; comments and whitespace-only
/// text dropped. Reference-only details libvirt does not need are dropped too: `<emulator>` (libvirt's default
/// for x86_64 hvm is the same binary) and `<alias>` names without the `ua-` prefix (libvirt keeps only user
/// aliases, which must start with `ua-`).
fn canonical(xml: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("XML: {e}"));
    fn walk(node: roxmltree::Node, path: &str, out: &mut Vec<String>) {
        let name = node.tag_name().name();
        if name == "emulator" || (name == "alias" && !node.attribute("name").unwrap_or("").starts_with("ua-")) {
            return;
        }
        let mut attrs: Vec<String> = node.attributes().map(|a| format!("{}={:?}", a.name(), a.value())).collect();
        if let Some(ns) = node
            .tag_name()
            .namespace()
            .filter(|_| node.parent_element().is_some_and(|p| p.tag_name().namespace() != node.tag_name().namespace()))
        {
            attrs.push(format!("xmlns={ns:?}"));
        }
        attrs.sort();
        let here = format!("{path}/{name}");
        out.push(format!("{here} {}", attrs.join(" ")).trim_end().to_owned());
        for child in node.children() {
            if child.is_element() {
                walk(child, &here, out);
            } else if let Some(t) = child.text().map(str::trim).filter(|t| !t.is_empty() && child.is_text()) {
                out.push(format!("{here} = {t:?}"));
            }
        }
    }
    let mut out = Vec::new();
    walk(doc.root_element(), "", &mut out);
    out
}

#[test]
fn the_reference_domain_of_the_launcher_image_matches_the_conversion_in_substance() {
    let reference_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/launcher/domain-reference.xml");
    let mut reference = read(&reference_path);
    for (theirs, ours) in reference_paths() {
        reference = reference.replace(&theirs, &ours);
    }
    let converted = to_domain_xml(&fixture("reference"), &emulation()).unwrap_or_else(|e| panic!("{e}"));
    let (want, got) = (canonical(&reference).join("\n"), canonical(&converted).join("\n"));
    // The comparison sees attribute values (not only the element structure).
    assert_ne!(canonical(&reference), canonical(&reference.replacen("cache='none'", "cache='writeback'", 1)));
    assert!(
        want == got,
        "{} and the conversion of tests/golden/reference.vmi.yaml differ (- reference, + converted):\n{}",
        reference_path.display(),
        line_diff(&want, &got)
    );
}

#[test]
fn a_line_diff_shows_what_changed_with_context() {
    let d = line_diff("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\ne\nf\ng\n");
    assert_eq!(d, "  …\n  b\n  c\n- d\n+ D\n  e\n  f\n  …\n");
}
