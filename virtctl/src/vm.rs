//! `virtctl start|stop|restart VM`: one PUT of the VM's subresource in `subresources.kubevirt.io/v1` (contract §8),
//! with upstream virtctl's flags, output and errors:
//!
//! ```text
//! start   [--paused] [--dry-run]                      body StartOptions{paused, dryRun}
//! stop    [--force --grace-period N] [--dry-run]      body StopOptions{gracePeriod, dryRun}
//! restart [--force --grace-period 0] [--dry-run]      body RestartOptions{gracePeriodSeconds, dryRun}
//! ─► ("Dry Run execution") "VM <name> was scheduled to <verb>"  |  upstream's error text, exit 1
//! ```
//!
//! `--force` and `--grace-period` go together or not at all, as upstream's.

use contracts::kubevirt::consts::{SUBRESOURCES_GROUP, VERSION};
use serde_json::{Value, json};

/// The verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `start`.
    Start,
    /// `stop`.
    Stop,
    /// `restart`.
    Restart,
}

impl Verb {
    /// The subresource (and command) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
        }
    }

    /// Upstream's error text around the server's `message` (`force`: with --force).
    pub fn error(self, force: bool, message: &str) -> String {
        match (self, force) {
            (Verb::Start, _) => format!("Error starting VirtualMachine {message}"),
            (Verb::Stop, false) => format!("error stopping VirtualMachine {message}"),
            (Verb::Stop, true) => format!("error force stopping VirtualMachine: {message}"),
            (Verb::Restart, false) => format!("error restarting VirtualMachine: {message}"),
            (Verb::Restart, true) => format!("error force restarting VirtualMachine: {message}"),
        }
    }
}

/// Flags of `start`, `stop` and `restart` (upstream's names; each command reads its own).
#[derive(Debug, Clone, clap::Args)]
pub struct LifecycleArgs {
    /// The VirtualMachine.
    pub name: String,
    /// start: start the VM paused.
    #[arg(long)]
    pub paused: bool,
    /// stop/restart: shut the VM down at once (with --grace-period).
    #[arg(long)]
    pub force: bool,
    /// stop/restart: the grace period in seconds (only with --force; restart accepts 0 only).
    #[arg(long, allow_negative_numbers = true)]
    pub grace_period: Option<i64>,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The request body of `verb` with `args`, or upstream's usage error.
pub fn body(verb: Verb, args: &LifecycleArgs) -> Result<Value, String> {
    let dry_run: Vec<&str> = if args.dry_run { vec!["All"] } else { Vec::new() };
    if verb != Verb::Start && args.grace_period.is_some() != args.force {
        return Err(String::from("Must both use --force=true and set --grace-period."));
    }
    let grace = args.grace_period.filter(|_| args.force);
    // Go's omitempty: unset fields are left out.
    let mut body = serde_json::Map::new();
    match verb {
        Verb::Start => {
            body.insert("paused".into(), json!(args.paused));
        }
        Verb::Stop | Verb::Restart => {
            let field = if verb == Verb::Stop { "gracePeriod" } else { "gracePeriodSeconds" };
            if let Some(g) = grace {
                body.insert(field.into(), json!(g));
            }
        }
    }
    if !dry_run.is_empty() {
        body.insert("dryRun".into(), json!(dry_run));
    }
    Ok(Value::Object(body))
}

/// The subresource path of `verb` on VM `name` in `namespace`.
pub fn path(verb: Verb, namespace: &str, name: &str) -> String {
    format!("/apis/{SUBRESOURCES_GROUP}/{VERSION}/namespaces/{namespace}/virtualmachines/{name}/{}", verb.as_str())
}

/// Runs `verb`; `Ok` with the lines to print, `Err` with upstream's error text.
pub async fn run(verb: Verb, args: &LifecycleArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let body = body(verb, args)?;
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    let request = http::Request::put(path(verb, namespace, &args.name))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| e.to_string())?;
    let force = args.force && verb != Verb::Start;
    match client.request_text(request).await {
        Ok(_) => Ok(format!("{dry}VM {} was scheduled to {}", args.name, verb.as_str())),
        Err(e) => Err(format!("{dry}{}", verb.error(force, &crate::vmi::message(&e)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(force: bool, grace: Option<i64>, dry_run: bool) -> LifecycleArgs {
        LifecycleArgs { name: "vm1".into(), paused: false, force, grace_period: grace, dry_run }
    }

    #[test]
    fn bodies_are_upstreams_options() {
        assert_eq!(body(Verb::Start, &args(false, None, true)), Ok(json!({"paused": false, "dryRun": ["All"]})));
        assert_eq!(body(Verb::Stop, &args(true, Some(0), false)), Ok(json!({"gracePeriod": 0})));
        assert_eq!(body(Verb::Stop, &args(false, None, false)), Ok(json!({})));
        assert_eq!(body(Verb::Restart, &args(true, Some(0), false)), Ok(json!({"gracePeriodSeconds": 0})));
        let both = Err("Must both use --force=true and set --grace-period.".to_owned());
        assert_eq!(body(Verb::Stop, &args(false, Some(5), false)), both);
        assert_eq!(body(Verb::Restart, &args(true, None, false)), both);
        assert_eq!(Verb::Restart.error(true, "x"), "error force restarting VirtualMachine: x");
        assert_eq!(
            path(Verb::Restart, "ns", "vm1"),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm1/restart"
        );
    }
}
