//! `virtctl migrate VM` and `virtctl migrate-cancel VM` with upstream virtctl's flags, output and errors
//! (upstream `pkg/virtctl/vm/migrate.go`, `migrate_cancel.go`; contract §8):
//!
//! ```text
//! migrate VM [--addedNodeSelector k=v,...] [--dry-run]
//!   PUT subresources.kubevirt.io/v1 …/virtualmachines/VM/migrate, body MigrateOptions{dryRun, addedNodeSelector}
//!   ─► ("Dry Run execution") "VM <VM> was scheduled to migrate"  |  "Error migrating VirtualMachine <message>"
//! migrate-cancel VM [--dry-run]
//!   list VirtualMachineInstanceMigrations labelled kubevirt.io/vmi-name==VM ─► delete the first that is not final
//!   ─► ("Dry Run execution") "VM <VM> was scheduled to migrate-cancel"  |  "Found no migration to cancel for <VM>"
//! ```
//!
//! Deleting a migration that is not final cancels it (the VM controller aborts it and then removes its finalizer).

use std::collections::BTreeMap;

use contracts::kubevirt::consts::{SUBRESOURCES_GROUP, VERSION, label};
use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::vmi::message;

/// The command (and subresource) name of `migrate`.
pub const MIGRATE: &str = "migrate";
/// The command name of `migrate-cancel`.
pub const MIGRATE_CANCEL: &str = "migrate-cancel";

/// One `--addedNodeSelector` value: its `key=value` pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairs(pub Vec<(String, String)>);

/// Flags of `migrate` (upstream's names).
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// The VirtualMachine.
    pub name: String,
    /// --addedNodeSelector=key=value1,key2=value2: configure an additional node selector for the one-off migration
    /// attempt. AddedNodeSelector can only restrict constraints already set on the VM. By default the scheduler is
    /// responsible for finding the best Node, which is the recommended way of migrating VMs.
    #[arg(long = "addedNodeSelector", value_name = "key=value,...", value_parser = parse_pairs)]
    pub added_node_selector: Vec<Pairs>,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Flags of `migrate-cancel`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateCancelArgs {
    /// The VirtualMachine.
    pub name: String,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Splits one CSV record as Go's `encoding/csv` reads it (fields separated by commas; a field may be quoted, `""`
/// inside quotes is a quote).
fn csv_fields(s: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("parse error on line 1: extraneous or missing \" in quoted-field".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err("parse error on line 1: extraneous or missing \" in quoted-field".into()),
            }
            continue;
        }
        loop {
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => break,
                Some('"') => return Err("parse error on line 1: bare \" in non-quoted-field".into()),
                Some(c) => field.push(c),
            }
        }
        fields.push(field);
    }
}

/// One flag value as pflag's `StringToString` reads it: no `=` is an error; exactly one `=` is a single pair (the
/// value may contain commas; surrounding quotes are trimmed); more are comma-separated CSV pairs.
pub fn parse_pairs(val: &str) -> Result<Pairs, String> {
    let items = match val.matches('=').count() {
        0 => return Err(format!("{val} must be formatted as key=value")),
        1 => vec![val.trim_matches('"').to_owned()],
        _ => csv_fields(val)?,
    };
    items
        .into_iter()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => Err(format!("{pair} must be formatted as key=value")),
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Pairs)
}

/// The request body of `migrate` (Go's omitempty: unset fields are left out).
pub fn body(args: &MigrateArgs) -> Value {
    let selector: BTreeMap<&str, &str> =
        args.added_node_selector.iter().flat_map(|p| p.0.iter()).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut body = serde_json::Map::new();
    if args.dry_run {
        body.insert("dryRun".into(), json!(["All"]));
    }
    if !selector.is_empty() {
        body.insert("addedNodeSelector".into(), json!(selector));
    }
    Value::Object(body)
}

/// The `migrate` subresource path of VM `name` in `namespace`.
pub fn path(namespace: &str, name: &str) -> String {
    format!("/apis/{SUBRESOURCES_GROUP}/{VERSION}/namespaces/{namespace}/virtualmachines/{name}/{MIGRATE}")
}

/// `virtctl migrate`: `Ok` with the lines to print, `Err` with upstream's error text.
pub async fn migrate(args: &MigrateArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    let request = http::Request::put(path(namespace, &args.name))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body(args).to_string().into_bytes())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(_) => Ok(format!("{dry}VM {} was scheduled to {MIGRATE}", args.name)),
        Err(e) => Err(format!("{dry}Error migrating VirtualMachine {}", message(&e))),
    }
}

/// The migration `migrate-cancel` deletes: the first of the VMI's that is not final.
pub fn to_cancel(migrations: &[VirtualMachineInstanceMigration]) -> Option<&VirtualMachineInstanceMigration> {
    migrations.iter().find(|m| !m.is_final())
}

/// `virtctl migrate-cancel`: `Ok` with the lines to print, `Err` with upstream's error text.
pub async fn migrate_cancel(args: &MigrateCancelArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let name = &args.name;
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client, namespace);
    let selector = ListParams::default().labels(&format!("{}=={name}", label::VMI_NAME));
    let migrations = api
        .list(&selector)
        .await
        .map_err(|e| format!("Error fetching virtual machine instance migration list  {}", message(&e)))?;
    // Upstream says so once the list is read.
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    let Some(migration) = to_cancel(&migrations.items) else {
        return Err(format!("{dry}Found no migration to cancel for {name}"));
    };
    let migration_name = migration.metadata.name.clone().unwrap_or_default();
    let params = DeleteParams { dry_run: args.dry_run, ..DeleteParams::default() };
    api.delete(&migration_name, &params).await.map_err(|e| {
        format!("{dry}Error canceling migration {migration_name} of a VirtualMachine {name}: {}", message(&e))
    })?;
    Ok(format!("{dry}VM {name} was scheduled to {MIGRATE_CANCEL}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Pairs {
        Pairs(v.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn selectors_are_read_as_pflag_reads_them() {
        assert_eq!(parse_pairs("kubernetes.io/hostname=node02"), Ok(pairs(&[("kubernetes.io/hostname", "node02")])));
        assert_eq!(parse_pairs("a=1,b=2"), Ok(pairs(&[("a", "1"), ("b", "2")])));
        // One `=`: the whole text is one pair.
        assert_eq!(parse_pairs("a=1,2"), Ok(pairs(&[("a", "1,2")])));
        assert_eq!(parse_pairs("\"a=1\""), Ok(pairs(&[("a", "1")])));
        assert_eq!(parse_pairs("\"a=1,x\",b=2"), Ok(pairs(&[("a", "1,x"), ("b", "2")])));
        assert_eq!(parse_pairs("a=1,b=2,c"), Err("c must be formatted as key=value".to_owned()));
        assert_eq!(parse_pairs("zone"), Err("zone must be formatted as key=value".to_owned()));
        assert!(parse_pairs("a=1,b\"=2").is_err());
        assert_eq!(parse_pairs("a="), Ok(pairs(&[("a", "")])));
    }

    #[test]
    fn bodies_are_upstreams_options() {
        let args = |selectors: Vec<Pairs>, dry_run: bool| MigrateArgs {
            name: "vm1".into(),
            added_node_selector: selectors,
            dry_run,
        };
        assert_eq!(body(&args(vec![], false)), json!({}));
        assert_eq!(
            body(&args(vec![pairs(&[("a", "1"), ("b", "2")]), pairs(&[("a", "3")])], true)),
            json!({"dryRun": ["All"], "addedNodeSelector": {"a": "3", "b": "2"}})
        );
        assert_eq!(path("ns", "vm1"), "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm1/migrate");
    }

    #[test]
    fn the_first_migration_that_is_not_final_is_cancelled() -> Result<(), String> {
        let m = |name: &str, phase: Option<&str>| -> Result<VirtualMachineInstanceMigration, String> {
            let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name}, "spec": {"vmiName": "vm1"}});
            if let Some(p) = phase {
                v["status"] = json!({"phase": p});
            }
            serde_json::from_value(v).map_err(|e| e.to_string())
        };
        let list = vec![m("a", Some("Succeeded"))?, m("b", Some("Failed"))?, m("c", None)?, m("d", Some("Running"))?];
        assert_eq!(to_cancel(&list).and_then(|m| m.metadata.name.as_deref()), Some("c"));
        assert!(to_cancel(&list[..2]).is_none());
        Ok(())
    }
}
