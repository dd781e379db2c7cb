//! `virtctl expose vmi|vm|vmirs NAME --name SVC [--port P] [--target-port T] [--type T] …`: a Service selecting the
//! VM's launcher pods, as upstream virtctl creates it (contract §8):
//!
//! ```text
//! vmi / vm NAME  ─► selector vmi.kubevirt.io/id = launcher::vmi_id(NAME)   (the label every launcher pod has)
//! vmirs NAME     ─► selector = the replica set's matchLabels (matchExpressions refused)
//! ports: --port (with --target-port, --protocol, --port-name), else the pod network interface's `ports`
//! ─► create the Service ─► "Service SVC successfully created for vmi NAME"
//! ```

use crate::vmi::message;
use contracts::kubevirt::launcher::vmi_id;
use crds::kubevirt::vmi::VirtualMachineInstanceSpec;
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;

/// Flags of `expose`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExposeArgs {
    /// `vmi`, `vm` or `vmirs` (also their long and plural names).
    pub kind: String,
    /// The name.
    pub resource: String,
    /// Name of the service created for the exposure of the VM.
    #[arg(long)]
    pub name: String,
    /// The port that the service should serve on.
    #[arg(long, default_value_t = 0)]
    pub port: i32,
    /// Name or number for the port on the VM that the service should direct traffic to.
    #[arg(long)]
    pub target_port: Option<String>,
    /// The network protocol for the service to be created.
    #[arg(long, default_value = "TCP")]
    pub protocol: String,
    /// Type for this service: ClusterIP, NodePort, or LoadBalancer.
    #[arg(long = "type", default_value = "ClusterIP")]
    pub service_type: String,
    /// Name of the port.
    #[arg(long)]
    pub port_name: Option<String>,
    /// ClusterIP to be assigned to the service (`None`: headless).
    #[arg(long)]
    pub cluster_ip: Option<String>,
    /// Additional external IP address to accept for the service.
    #[arg(long)]
    pub external_ip: Option<String>,
}

/// Upstream's protocol names (case insensitive).
pub fn protocol(s: &str) -> Result<String, String> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok("TCP".into()),
        "udp" => Ok("UDP".into()),
        _ => Err(format!("unknown protocol: {s}")),
    }
}

/// Upstream's service types (case insensitive; ExternalName refused).
pub fn service_type(s: &str) -> Result<String, String> {
    match s.to_ascii_lowercase().as_str() {
        "clusterip" => Ok("ClusterIP".into()),
        "nodeport" => Ok("NodePort".into()),
        "loadbalancer" => Ok("LoadBalancer".into()),
        "externalname" => Err(format!("type: {s} not supported")),
        _ => Err(format!("unknown service type: {s}")),
    }
}

/// The ports of the interface on the pod network (upstream's `podNetworkPorts`).
pub fn pod_network_ports(spec: &VirtualMachineInstanceSpec) -> Vec<ServicePort> {
    let Some(pod_net) = spec.networks.iter().flatten().find(|n| n.pod.is_some()) else { return Vec::new() };
    let interfaces = spec.domain.devices.interfaces.iter().flatten();
    let Some(iface) = interfaces.into_iter().find(|i| i.name == pod_net.name) else { return Vec::new() };
    iface
        .ports
        .iter()
        .flatten()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: Some(
                p.protocol
                    .as_ref()
                    .and_then(|pr| serde_json::to_value(pr).ok()?.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "TCP".into()),
            ),
            port: p.port,
            ..Default::default()
        })
        .collect()
}

/// `virtctl expose`: `Ok` with the line to print, `Err` with upstream's error text.
pub async fn expose(args: &ExposeArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let protocol = protocol(&args.protocol)?;
    let service_type = service_type(&args.service_type)?;
    let name = &args.resource;
    let kind = args.kind.to_ascii_lowercase();
    let (selector, mut ports): (BTreeMap<String, String>, Vec<ServicePort>) = match kind.as_str() {
        "vmi" | "vmis" | "virtualmachineinstance" | "virtualmachineinstances" => {
            let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
            let vmi =
                api.get(name).await.map_err(|e| format!("error fetching VirtualMachineInstance: {}", message(&e)))?;
            (id_selector(name), pod_network_ports(&vmi.spec))
        }
        "vm" | "vms" | "virtualmachine" | "virtualmachines" => {
            let api: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
            let vm = api.get(name).await.map_err(|e| format!("error fetching VirtualMachine: {}", message(&e)))?;
            (id_selector(name), template_ports(&vm.spec.template))
        }
        "vmirs" | "vmirss" | "virtualmachineinstancereplicaset" | "virtualmachineinstancereplicasets" => {
            let api: Api<VirtualMachineInstanceReplicaSet> = Api::namespaced(client.clone(), namespace);
            let rs = api
                .get(name)
                .await
                .map_err(|e| format!("error fetching VirtualMachineInstanceReplicaSet: {}", message(&e)))?;
            let selector = rs.spec.selector.clone();
            let labels = selector.match_labels.unwrap_or_default();
            if labels.is_empty() {
                return Err("cannot expose VirtualMachineInstanceReplicaSet without any selector labels".into());
            }
            if selector.match_expressions.is_some_and(|e| !e.is_empty()) {
                return Err("cannot expose VirtualMachineInstanceReplicaSet with match expressions".into());
            }
            (labels, template_ports(&rs.spec.template))
        }
        _ => return Err(format!("unsupported resource type: {kind}")),
    };
    if args.port != 0 {
        let target_port = args.target_port.as_ref().map(|t| match t.parse::<i32>() {
            Ok(n) => IntOrString::Int(n),
            Err(_) => IntOrString::String(t.clone()),
        });
        ports = vec![ServicePort {
            name: args.port_name.clone(),
            protocol: Some(protocol),
            port: args.port,
            target_port,
            ..Default::default()
        }];
    }
    if ports.is_empty() {
        return Err("couldn't find port via --port flag or introspection".into());
    }
    let service = Service {
        metadata: ObjectMeta { name: Some(args.name.clone()), namespace: Some(namespace.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            ports: Some(ports),
            selector: Some(selector),
            cluster_ip: args.cluster_ip.clone(),
            type_: Some(service_type),
            external_ips: args.external_ip.clone().map(|ip| vec![ip]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api: Api<Service> = Api::namespaced(client, namespace);
    api.create(&PostParams::default(), &service)
        .await
        .map_err(|e| format!("service creation failed: {}", message(&e)))?;
    Ok(format!("Service {} successfully created for {} {name}", args.name, args.kind))
}

fn template_ports(t: &crds::kubevirt::vm::VirtualMachineInstanceTemplateSpec) -> Vec<ServicePort> {
    t.spec.as_ref().map(pod_network_ports).unwrap_or_default()
}

fn id_selector(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(contracts::kubevirt::consts::label::VMI_ID.to_owned(), vmi_id(name))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_names_and_ports() {
        assert_eq!(protocol("udp"), Ok("UDP".into()));
        assert_eq!(protocol("sctp"), Err("unknown protocol: sctp".into()));
        assert_eq!(service_type("nodeport"), Ok("NodePort".into()));
        assert_eq!(service_type("ExternalName"), Err("type: ExternalName not supported".into()));
        let spec: VirtualMachineInstanceSpec = serde_json::from_value(serde_json::json!({
            "domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}, "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}]},
                {"name": "other", "bridge": {}, "ports": [{"port": 22}]}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "other", "multus": {"networkName": "x"}}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let ports: Vec<(Option<String>, i32, Option<String>)> =
            pod_network_ports(&spec).into_iter().map(|p| (p.name, p.port, p.protocol)).collect();
        assert_eq!(ports, [(Some("http".into()), 80, Some("TCP".into())), (None, 53, Some("UDP".into()))]);
        assert_eq!(id_selector("vm1").get("vmi.kubevirt.io/id").map(String::as_str), Some("vm1"));
    }
}
