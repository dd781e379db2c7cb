//! `virtctl`: the subset of KubeVirt's CLI this project provides — `image-upload`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "virtctl", version, about = "KubeVirt command line client (image-upload)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Upload a VM image to a DataVolume or PersistentVolumeClaim.
    ImageUpload(virtctl::ImageUploadArgs),
}

async fn client(args: &virtctl::ImageUploadArgs) -> anyhow::Result<(kube::Client, String)> {
    let path = args.kubeconfig.clone().or_else(|| std::env::var_os("KUBECONFIG").map(Into::into));
    let cfg = match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(&p)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let ns = args.namespace.clone().unwrap_or_else(|| cfg.default_namespace.clone());
    Ok((kube::Client::try_from(cfg)?, ns))
}

fn main() -> ExitCode {
    let Cmd::ImageUpload(args) = Cli::parse().cmd;
    controller_runtime::binary::run(async {
        let (c, ns) = client(&args).await?;
        virtctl::image_upload(&args, c, &ns).await?;
        Ok(())
    })
}
