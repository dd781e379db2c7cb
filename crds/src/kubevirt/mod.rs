//! `kubevirt.io/v1` (also served as `v1alpha3`): KubeVirt's core API. The [`VirtualMachine`] ([`vm`]), the [`VirtualMachineInstanceReplicaSet`]
//! ([`replicaset`]), the [`VirtualMachineInstanceMigration`] ([`migration`]) and the [`VirtualMachineInstance`] ([`vmi`], with its domain in [`domain`], volumes in [`volume`] and networks in [`network`]); its CRD is rendered
//! by [`crd`] with the CDI ones. The cluster's configuration is the [`config::KubeVirt`] object. The group's exact wire constants are in [`consts`] (from `contracts`).
//!
//! Field names, enum values and JSON shapes are upstream's; fields this version does not model survive a round trip
//! through the types and are not pruned by the API server ([`wire`] explains how).
//!
//! Contract: `../shared/specs/kubevirt.md`.

/// KubeVirt's exact wire constants (kept in `contracts`).
pub use contracts::kubevirt::consts;
pub mod config;
pub mod crd;
pub mod domain;
pub mod instancetype;
pub mod migration;
pub mod migration_policy;
pub mod network;
pub mod replicaset;
pub mod vm;
pub mod vmi;
pub mod volume;
pub mod wire;

pub use domain::{Devices, Disk, DomainSpec, Interface};
pub use migration::VirtualMachineInstanceMigration;
pub use network::Network;
pub use replicaset::VirtualMachineInstanceReplicaSet;
pub use vm::{RunStrategy, VirtualMachine, VirtualMachineSpec, VirtualMachineStatus};
pub use vmi::{
    ConditionStatus, VirtualMachineInstance, VirtualMachineInstanceCondition, VirtualMachineInstanceConditionType,
    VirtualMachineInstancePhase, VirtualMachineInstanceSpec, VirtualMachineInstanceStatus,
};
pub use volume::Volume;
pub use wire::{Extra, Marker};
