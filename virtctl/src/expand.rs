//! `virtctl expand --vm NAME | --file FILE [-o yaml|json]`: the VM with its instancetype and preference applied,
//! as virt-api's `expand-spec` answers it (contract §8), with upstream virtctl's flags, output and errors:
//!
//! ```text
//! --vm NAME     GET  …/namespaces/{ns}/virtualmachines/{NAME}/expand-spec
//! --file FILE   PUT  …/namespaces/{ns}/expand-vm-spec   (FILE: YAML or JSON, `-` for stdin)
//! ─► the VM as YAML (default) or JSON  |  "error expanding VirtualMachine - NAME in namespace - NS: …", exit 1
//! ```

use std::io::Read;
use std::path::PathBuf;

use contracts::kubevirt::consts::{SUBRESOURCES_GROUP, VERSION};
use serde_json::Value;

/// Flags of `expand` (upstream's names).
#[derive(Debug, Clone, clap::Args)]
pub struct ExpandArgs {
    /// Specify VirtualMachine name that should be expanded. Mutually exclusive with "--file" flag.
    #[arg(long, conflicts_with = "file")]
    pub vm: Option<String>,
    /// If present, the Virtual Machine spec in provided file will be expanded. Mutually exclusive with "--vm" flag.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Specify a format that will be used to display output.
    #[arg(short = 'o', long, default_value = "yaml")]
    pub output: String,
}

/// How the expanded VM is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `yaml` (the default).
    Yaml,
    /// `json`, indented by one space as upstream's.
    Json,
}

/// What to expand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A stored VM, by name.
    Vm(String),
    /// A file (`-`: stdin).
    File(PathBuf),
}

/// The source and format `args` ask for, or upstream's usage error.
pub fn parse(args: &ExpandArgs) -> Result<(Source, Format), String> {
    let source = match (&args.vm, &args.file) {
        (Some(vm), _) if !vm.is_empty() => Source::Vm(vm.clone()),
        (_, Some(f)) if !f.as_os_str().is_empty() => Source::File(f.clone()),
        _ => return Err("error invalid arguments - VirtualMachine name or file must be provided".into()),
    };
    let format = match args.output.as_str() {
        "yaml" => Format::Yaml,
        "json" => Format::Json,
        other => return Err(format!("error not supported output format defined: {other}")),
    };
    Ok((source, format))
}

/// The VM in `data` (YAML or JSON), or upstream's decoding error.
pub fn decode(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("error decoding VirtualMachine {e}"))?;
    let vm: Value = serde_saphyr::from_str(text).map_err(|e| format!("error decoding VirtualMachine {e}"))?;
    if !vm.is_object() {
        return Err("error decoding VirtualMachine: not an object".into());
    }
    Ok(vm)
}

/// `vm` printed in `format`.
pub fn render(vm: &Value, format: Format) -> Result<String, String> {
    match format {
        Format::Yaml => serde_saphyr::to_string(vm).map_err(|e| e.to_string()),
        Format::Json => {
            let mut out = Vec::new();
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b" "));
            serde::Serialize::serialize(vm, &mut ser).map_err(|e| e.to_string())?;
            String::from_utf8(out).map_err(|e| e.to_string())
        }
    }
}

fn base(namespace: &str) -> String {
    format!("/apis/{SUBRESOURCES_GROUP}/{VERSION}/namespaces/{namespace}")
}

/// Runs `expand`; `Ok` with the VM to print, `Err` with upstream's error text.
pub async fn expand(args: &ExpandArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let (source, format) = parse(args)?;
    let (request, name) = match source {
        Source::Vm(name) => {
            let path = format!("{}/virtualmachines/{name}/expand-spec", base(namespace));
            (http::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?, name)
        }
        Source::File(file) => {
            let data = if file.as_os_str() == "-" {
                let mut data = Vec::new();
                std::io::stdin().read_to_end(&mut data).map_err(|e| format!("error reading from stdin: {e}"))?;
                data
            } else {
                std::fs::read(&file).map_err(|e| format!("error reading file {e}"))?
            };
            let vm = decode(&data)?;
            let name = vm.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let request = http::Request::put(format!("{}/expand-vm-spec", base(namespace)))
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(vm.to_string().into_bytes())
                .map_err(|e| e.to_string())?;
            (request, name)
        }
    };
    let fail = |why: String| format!("error expanding VirtualMachine - {name} in namespace - {namespace}: {why}");
    let text = client.request_text(request).await.map_err(|e| fail(crate::vmi::message(&e)))?;
    let vm: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
    Ok(render(&vm, format)?.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(vm: Option<&str>, file: Option<&str>, output: &str) -> ExpandArgs {
        ExpandArgs { vm: vm.map(Into::into), file: file.map(Into::into), output: output.into() }
    }

    #[test]
    fn flags_choose_the_source_and_format_as_upstreams() {
        assert_eq!(parse(&args(Some("vm1"), None, "yaml")), Ok((Source::Vm("vm1".into()), Format::Yaml)));
        assert_eq!(parse(&args(None, Some("-"), "json")), Ok((Source::File("-".into()), Format::Json)));
        assert_eq!(
            parse(&args(None, None, "yaml")),
            Err("error invalid arguments - VirtualMachine name or file must be provided".into())
        );
        assert_eq!(
            parse(&args(Some("vm1"), None, "table")),
            Err("error not supported output format defined: table".into())
        );
    }

    #[test]
    fn files_are_yaml_or_json_and_output_round_trips() -> Result<(), String> {
        let vm = decode(b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\n")?;
        assert_eq!(vm["metadata"]["name"], "vm1");
        assert_eq!(decode(br#"{"kind": "VirtualMachine"}"#), Ok(json!({"kind": "VirtualMachine"})));
        assert!(decode(b"- a\n- b\n").is_err_and(|e| e.starts_with("error decoding VirtualMachine")));
        assert!(decode(b"kind: [").is_err_and(|e| e.starts_with("error decoding VirtualMachine")));
        let yaml = render(&vm, Format::Yaml)?;
        assert_eq!(decode(yaml.as_bytes()), Ok(vm.clone()));
        let json = render(&vm, Format::Json)?;
        assert!(json.starts_with("{\n \"apiVersion\""), "{json}");
        assert_eq!(decode(json.as_bytes()), Ok(vm));
        Ok(())
    }
}
