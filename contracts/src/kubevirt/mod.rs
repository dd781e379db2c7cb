//! KubeVirt's (`kubevirt.io`) wire contracts: its exact constants ([`consts`]), the node agent ↔ launcher ([`launcher`])
//! and virt-api ↔ node agent ([`node_api`]) hand-overs.

pub mod consts;
pub mod launcher;
pub mod node_api;
