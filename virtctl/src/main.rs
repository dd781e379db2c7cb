//! `virtctl`: the subset of KubeVirt's CLI this project provides — `image-upload`, `start`, `stop`, `restart`,
//! `migrate`, `migrate-cancel`, `console`, `vnc`, `pause`, `unpause`, `expose`, `port-forward`, `expand`, `addvolume`,
//! `removevolume`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use virtctl::vm::{LifecycleArgs, Verb};
use virtctl::vmi;

#[derive(Parser)]
#[command(
    name = "virtctl",
    version,
    about = "KubeVirt command line client (image-upload, start, stop, restart, migrate, migrate-cancel, console, vnc, \
             pause, unpause, expose, port-forward, expand, addvolume, removevolume)"
)]
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
    /// Migrate a virtual machine.
    Migrate(virtctl::migrate::MigrateArgs),
    /// Cancel migration of a virtual machine.
    MigrateCancel(virtctl::migrate::MigrateCancelArgs),
    /// Connect to a console of a virtual machine instance.
    Console(vmi::ConsoleArgs),
    /// Open a VNC connection to a virtual machine instance.
    Vnc(vmi::VncArgs),
    /// Pause a virtual machine.
    Pause(vmi::PauseArgs),
    /// Unpause a virtual machine.
    Unpause(vmi::PauseArgs),
    /// Expose a virtual machine instance, virtual machine, or virtual machine instance replica set as a new service.
    Expose(virtctl::expose::ExposeArgs),
    /// Forward local ports to a virtualmachine or virtualmachineinstance.
    PortForward(virtctl::portforward::PortForwardArgs),
    /// Return the VirtualMachine object with expanded instancetype and preference.
    Expand(virtctl::expand::ExpandArgs),
    /// add a volume to a running VM
    Addvolume(virtctl::volume::AddVolumeArgs),
    /// remove a volume from a running VM
    Removevolume(virtctl::volume::RemoveVolumeArgs),
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
    let run = match cmd {
        Cmd::ImageUpload(args) => {
            return controller_runtime::binary::run(async move {
                let (c, ns) = client(namespace, kubeconfig).await?;
                virtctl::image_upload(&args, c, &ns).await?;
                Ok(())
            });
        }
        Cmd::Start(a) => Run::Lifecycle(Verb::Start, a),
        Cmd::Stop(a) => Run::Lifecycle(Verb::Stop, a),
        Cmd::Restart(a) => Run::Lifecycle(Verb::Restart, a),
        Cmd::Migrate(a) => Run::Migrate(a),
        Cmd::MigrateCancel(a) => Run::MigrateCancel(a),
        Cmd::Pause(a) => Run::Pause(vmi::PauseVerb::Pause, a),
        Cmd::Unpause(a) => Run::Pause(vmi::PauseVerb::Unpause, a),
        Cmd::Console(a) => Run::Console(a),
        Cmd::Vnc(a) => Run::Vnc(a),
        Cmd::Expose(a) => Run::Expose(a),
        Cmd::PortForward(a) => Run::PortForward(a),
        Cmd::Expand(a) => Run::Expand(a),
        Cmd::Addvolume(a) => Run::AddVolume(a),
        Cmd::Removevolume(a) => Run::RemoveVolume(a),
    };
    // Upstream's output and exit code: the result line on stdout, or its error text on stderr and exit 1.
    let mut failed = false;
    let code = controller_runtime::binary::run(async {
        let (c, ns) = client(namespace, kubeconfig).await?;
        let result = match &run {
            Run::Lifecycle(verb, args) => virtctl::vm::run(*verb, args, c, &ns).await.map(Some),
            Run::Migrate(args) => virtctl::migrate::migrate(args, c, &ns).await.map(Some),
            Run::MigrateCancel(args) => virtctl::migrate::migrate_cancel(args, c, &ns).await.map(Some),
            Run::Pause(verb, args) => vmi::pause(*verb, args, c, &ns).await.map(Some),
            Run::Console(args) => vmi::console(args, c, &ns).await.map(|()| None),
            Run::Vnc(args) => vmi::vnc(args, c, &ns).await.map(|()| None),
            Run::Expose(args) => virtctl::expose::expose(args, c, &ns).await.map(Some),
            Run::PortForward(args) => virtctl::portforward::port_forward(args, c, &ns).await.map(|()| None),
            Run::Expand(args) => virtctl::expand::expand(args, c, &ns).await.map(Some),
            Run::AddVolume(args) => virtctl::volume::add(args, c, &ns).await.map(Some),
            Run::RemoveVolume(args) => virtctl::volume::remove(args, c, &ns).await.map(Some),
        };
        match result {
            Ok(Some(line)) => println!("{line}"),
            Ok(None) => {}
            Err(message) => {
                eprintln!("{message}");
                failed = true;
            }
        }
        Ok(())
    });
    if failed { ExitCode::from(1) } else { code }
}

/// A command that prints upstream's result line or error text.
enum Run {
    Lifecycle(Verb, LifecycleArgs),
    Migrate(virtctl::migrate::MigrateArgs),
    MigrateCancel(virtctl::migrate::MigrateCancelArgs),
    Pause(vmi::PauseVerb, vmi::PauseArgs),
    Console(vmi::ConsoleArgs),
    Vnc(vmi::VncArgs),
    Expose(virtctl::expose::ExposeArgs),
    PortForward(virtctl::portforward::PortForwardArgs),
    Expand(virtctl::expand::ExpandArgs),
    AddVolume(virtctl::volume::AddVolumeArgs),
    RemoveVolume(virtctl::volume::RemoveVolumeArgs),
}
