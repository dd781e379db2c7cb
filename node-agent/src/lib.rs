//! The node agent (upstream's virt-handler role; contract `../shared/specs/kubevirt.md` §7): it drives the
//! libvirt domain of each VMI on its node, inside that VMI's virt-launcher pod, and reports the VMI's phase from
//! libvirt's real domain state. The only crate that links libvirt.
//!
//! ```text
//! VMI (defaulted) + ConvertContext ──domain_xml::to_domain_xml──► domain XML
//!                                                                    │ libvirt::Libvirt::connect(SocketDir::on_node(pod).libvirt_uri())
//!                                                                    ▼ define ─► start ─► (poll) state ─► shutdown / destroy ─► undefine
//! (DomainState, StateReason) + phase::Acpi ──phase::phase_for──► VMI phase
//! ```
//!
//! * [`domain_xml`] (pure): VMI → libvirt domain XML, what is mapped and what is refused.
//! * [`libvirt`]: a thin blocking client of one libvirt daemon (no events: state is polled; no `unsafe`).
//! * [`phase`] (pure): libvirt state and reason → VMI phase.
//! * [`agent`]: the reconciler of the node's VMIs; [`server`]: the node API virt-api calls (console, VNC, pause).
//! * [`migration`]: live migration between two node agents (source job, target listeners, TLS proxies).
//! * [`domainstats`]: upstream's `kubevirt_vmi_*` domain metrics, read from the launchers' libvirt at each scrape.
//! * [`hotplug`]: CPU and memory hotplug in a running domain after a workload-update migration; [`volumes`]:
//!   hotplugged volumes into the launcher pod and the guest, and out again.
//!
//! The paths the XML points at are the launcher pod contract's (`contracts::kubevirt::launcher`); the launcher
//! prepares the files there.

#![deny(missing_docs)]

pub mod agent;
pub mod domain_xml;
pub mod domainstats;
pub mod hotplug;
pub mod libvirt;
pub mod migration;
pub mod phase;
pub mod pod_setup;
pub mod screenshot;
pub mod server;
pub mod vcpu;
pub mod volumes;
mod xml;
