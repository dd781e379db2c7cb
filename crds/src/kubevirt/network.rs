//! `spec.networks[]` of a VirtualMachineInstance (contract §2.4): a name (interfaces refer to it) and exactly one
//! of `pod`, `multus`, `resourceClaim`. Without networks and interfaces, defaulting adds
//! `networks: [{name: default, pod: {}}]` and a matching interface with the cluster's default binding.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire::Extra;

/// The name of the network (and interface) defaulting adds.
pub const DEFAULT_NETWORK_NAME: &str = "default";

/// One network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Network {
    /// Name; an interface of the same name attaches to it.
    pub name: String,
    /// The pod network (the launcher pod's primary interface).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    /// A Multus secondary network (or the default one with `default: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multus: Option<MultusNetwork>,
    /// A DRA claim's network device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim: Option<ClaimRequest>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `networks[].pod`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodNetwork {
    /// IPv4 CIDR inside the VM for masquerade (default `10.0.2.0/24`).
    #[serde(rename = "vmNetworkCIDR", skip_serializing_if = "Option::is_none")]
    pub vm_network_cidr: Option<String>,
    /// IPv6 CIDR inside the VM for masquerade (default `fd10:0:2::/120`).
    #[serde(rename = "vmIPv6NetworkCIDR", skip_serializing_if = "Option::is_none")]
    pub vm_ipv6_network_cidr: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `networks[].multus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MultusNetwork {
    /// NetworkAttachmentDefinition: `name` (the VMI's namespace) or `namespace/name`.
    pub network_name: String,
    /// This Multus network replaces the pod network as the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A DRA claim and request (`networks[].resourceClaim`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClaimRequest {
    /// A `spec.resourceClaims[].name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The request of that claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_name: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}
