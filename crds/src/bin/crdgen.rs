//! `crdgen [--check] [DIR]`: writes the CRD YAML into DIR (default `deploy/crds` of this checkout); with
//! `--check`, writes nothing and exits 1 when a committed file differs from the generated text.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds"));
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: crdgen [--check] [DIR]");
                return ExitCode::SUCCESS;
            }
            other => dir = PathBuf::from(other),
        }
    }
    let rendered = match crds::crd::render_all() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut drift = false;
    for (file, yaml) in rendered {
        let path = dir.join(file);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                eprintln!(
                    "drift: {} differs from the generated CRD (run `cargo run -p crds --bin crdgen`)",
                    path.display()
                );
                drift = true;
            }
        } else if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, yaml)) {
            eprintln!("error: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}", path.display());
        }
    }
    if drift { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
