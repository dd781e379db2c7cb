//! KubeVirt's (`kubevirt.io`) wire contracts: its exact constants ([`consts`]), the node agent ↔ launcher ([`launcher`])
//! and virt-api ↔ node agent ([`node_api`]) hand-overs, and virt-api's port-forward path ([`portforward`]).

pub mod consts;
pub mod launcher;
pub mod node_api;
pub mod portforward;
