//! `virtctl`: the subset of KubeVirt's CLI this project provides — `image-upload`, `start`, `stop`, `restart`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use virtctl::vm::{LifecycleArgs, Verb};

#[derive(Parser)]
#[command(name = "virtctl", version, about = "KubeVirt command line client (image-upload, start, stop, restart)")]
struct Cli {
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Upload a VM image to a DataVolume or PersistentVolumeClaim.
    ImageUpload(virtctl::ImageUploadArgs),
    /// Start a virtual machine.
    Start(LifecycleArgs),
    /// Stop a virtual machine.
    Stop(LifecycleArgs),
    /// Restart a virtual machine.
    Restart(LifecycleArgs),
}

async fn client(namespace: Option<String>, kubeconfig: Option<PathBuf>) -> anyhow::Result<(kube::Client, String)> {
    let path = kubeconfig.or_else(|| std::env::var_os("KUBECONFIG").map(Into::into));
    let cfg = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(&p)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let ns = namespace.unwrap_or_else(|| cfg.default_namespace.clone());
    Ok((kube::Client::try_from(cfg)?, ns))
}

fn main() -> ExitCode {
    let Cli { namespace, kubeconfig, cmd } = Cli::parse();
    let (verb, args) = match cmd {
        Cmd::ImageUpload(args) => {
            return controller_runtime::binary::run(async move {
                let (c, ns) = client(namespace, kubeconfig).await?;
                virtctl::image_upload(&args, c, &ns).await?;
                Ok(())
            });
        }
        Cmd::Start(a) => (Verb::Start, a),
        Cmd::Stop(a) => (Verb::Stop, a),
        Cmd::Restart(a) => (Verb::Restart, a),
    };
    // Upstream's output and exit code: the result line on stdout, or its error text on stderr and exit 1.
    let mut failed = false;
    let code = controller_runtime::binary::run(async {
        let (c, ns) = client(namespace, kubeconfig).await?;
        match virtctl::vm::run(verb, &args, c, &ns).await {
            Ok(line) => println!("{line}"),
            Err(message) => {
                eprintln!("{message}");
                failed = true;
            }
        }
        Ok(())
    });
    if failed { ExitCode::from(1) } else { code }
}
