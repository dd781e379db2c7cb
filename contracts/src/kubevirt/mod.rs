//! KubeVirt's (`kubevirt.io`) wire contracts. So far its exact constants ([`consts`]); the node agent ↔ launcher
//! and virt-api ↔ node agent hand-overs join them with the VM half.

pub mod consts;
pub mod launcher;
