//! The VMI subresources the node agent carries out: `console`, `vnc` (websocket streams, subprotocol
//! `plain.kubevirt.io`) and `pause`, `unpause` (PUT), contract §0.2, §8.
//!
//! ```text
//! GET …/virtualmachineinstances/{name}/console|vnc   (Upgrade: websocket)
//!   ─► the VMI (404 with upstream's text) ─► check (pure, upstream's texts: not running, no serial console, …)
//!   ─► NodeClient::stream on the VMI's node ─► 101 to the client ─► controller_runtime::ws::bridge
//! PUT …/virtualmachineinstances/{name}/pause|unpause  ({"dryRun": ["All"]} checks only)
//!   ─► the VMI ─► check ─► NodeClient::command ─► 200
//! GET …/virtualmachineinstances/{name}/vnc/screenshot  ─► the VMI ─► check (as vnc) ─► NodeClient::fetch ─► the PNG
//! ```
//!
//! The node agent keeps one console (and one VNC session) per VMI: a new one closes the old, as upstream's.

use hyper::HeaderMap;

use contracts::kubevirt::consts::PLAIN_STREAM_PROTOCOL;
use contracts::kubevirt::node_api::Command;
use crds::kubevirt::{VirtualMachineInstance, VirtualMachineInstanceConditionType, VirtualMachineInstancePhase};

use crate::lifecycle::Refusal;

const VMI: &str = "virtualmachineinstance";

fn paused(vmi: &VirtualMachineInstance) -> bool {
    let conditions = vmi.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == VirtualMachineInstanceConditionType::Paused)
}

/// Upstream's checks of the VMI before `command` goes to its node (`validateVMIForConsole`, `vmiHasDisplay`,
/// the pause and unpause validators), with their texts.
pub fn check(command: Command, vmi: &VirtualMachineInstance) -> Result<(), Refusal> {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let devices = &vmi.spec.domain.devices;
    let running = vmi.phase() == VirtualMachineInstancePhase::Running;
    match command {
        Command::Console => {
            if devices.autoattach_serial_console == Some(false) {
                return Err(Refusal::bad_request("No serial consoles are present."));
            }
            if vmi.phase() == VirtualMachineInstancePhase::Failed {
                return Err(Refusal::conflict_on(VMI, name, "VMI is in failed status"));
            }
            if !running {
                return Err(Refusal::bad_request("VMI is not running"));
            }
        }
        Command::Vnc { .. } | Command::Screenshot => {
            if devices.autoattach_graphics_device == Some(false) {
                return Err(Refusal::bad_request("No graphics devices are present."));
            }
            if !running {
                return Err(Refusal::bad_request("VMI is not running"));
            }
        }
        Command::Pause => {
            if !running {
                return Err(Refusal::conflict_on(VMI, name, "VM is not running"));
            }
            if vmi.spec.liveness_probe.is_some() {
                return Err(Refusal::forbidden_on(
                    VMI,
                    name,
                    "Pausing VMIs with LivenessProbe is currently not supported",
                ));
            }
            if paused(vmi) {
                return Err(Refusal::conflict_on(VMI, name, "VMI is already paused"));
            }
        }
        Command::Unpause => {
            if !running {
                return Err(Refusal::conflict_on(VMI, name, "VMI is not running"));
            }
            if !paused(vmi) {
                return Err(Refusal::conflict_on(VMI, name, "VMI is not paused"));
            }
        }
    }
    Ok(())
}

/// The guest agent subresources (`guestosinfo`, `userlist`, `filesystemlist` GET; `freeze`, `unfreeze` PUT).
pub const GUEST_AGENT_SUBRESOURCES: [&str; 5] = ["guestosinfo", "userlist", "filesystemlist", "freeze", "unfreeze"];

/// What a guest agent subresource answers for `vmi`: upstream's refusals of a VMI that is not running or has no
/// agent connected (`AgentConnected`); with an agent, that talking to it is not supported here (501).
pub fn guest_agent(sub: &str, vmi: &VirtualMachineInstance) -> Refusal {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    if vmi.phase() != VirtualMachineInstancePhase::Running {
        let why = if sub == "freeze" { "VM is not running" } else { "VMI is not running" };
        return Refusal::conflict_on(VMI, name, why);
    }
    let conditions = vmi.status.as_ref().and_then(|s| s.conditions.as_ref());
    if !conditions.into_iter().flatten().any(|c| c.type_ == VirtualMachineInstanceConditionType::AgentConnected) {
        return Refusal::conflict_on(VMI, name, "VMI does not have guest agent connected");
    }
    Refusal {
        code: 501,
        reason: "NotImplemented",
        message: format!("the {sub} subresource is not supported by this virt-api"),
    }
}

/// The 404 of an unknown VMI, as upstream prints it.
pub fn vmi_not_found(name: &str) -> Refusal {
    Refusal::not_found_on(VMI, name)
}

/// A websocket handshake the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// `Sec-WebSocket-Accept` of the 101.
    pub accept: String,
    /// Whether the client offered `plain.kubevirt.io` (then the 101 names it).
    pub plain: bool,
}

/// The websocket handshake of `headers` (RFC 6455 §4.2.1), or the 400 of a request that is not one.
pub fn handshake(headers: &HeaderMap) -> Result<Handshake, Refusal> {
    let has_token = |name: hyper::header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has_token(hyper::header::CONNECTION, "upgrade") || !has_token(hyper::header::UPGRADE, "websocket") {
        return Err(Refusal::bad_request(
            "websocket: the client is not using the websocket protocol: 'upgrade' and 'websocket' tokens not found",
        ));
    }
    if headers.get(hyper::header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(b"13") {
        return Err(Refusal::bad_request(
            "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header",
        ));
    }
    let Some(key) = headers.get(hyper::header::SEC_WEBSOCKET_KEY) else {
        return Err(Refusal::bad_request(
            "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header is missing",
        ));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    Ok(Handshake { accept, plain: has_token(hyper::header::SEC_WEBSOCKET_PROTOCOL, PLAIN_STREAM_PROTOCOL) })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: &str, extra: serde_json::Value) -> VirtualMachineInstance {
        let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1"}, "spec": {"domain": {"devices": {}}}, "status": {"phase": phase}});
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn upstreams_checks_and_texts() {
        let paused = json!({"status": {"conditions": [{"type": "Paused", "status": "True"}]}});
        type Case = (Command, VirtualMachineInstance, Option<(u16, &'static str)>);
        let cases: Vec<Case> = vec![
            (Command::Console, vmi("Running", json!({})), None),
            (Command::Console, vmi("Scheduled", json!({})), Some((400, "VMI is not running"))),
            (
                Command::Console,
                vmi("Failed", json!({})),
                Some((
                    409,
                    "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VMI is in failed status",
                )),
            ),
            (
                Command::Console,
                vmi("Running", json!({"spec": {"domain": {"devices": {"autoattachSerialConsole": false}}}})),
                Some((400, "No serial consoles are present.")),
            ),
            (Command::Vnc { preserve_session: false }, vmi("Running", json!({})), None),
            (Command::Vnc { preserve_session: true }, vmi("Pending", json!({})), Some((400, "VMI is not running"))),
            (
                Command::Vnc { preserve_session: false },
                vmi("Running", json!({"spec": {"domain": {"devices": {"autoattachGraphicsDevice": false}}}})),
                Some((400, "No graphics devices are present.")),
            ),
            (Command::Pause, vmi("Running", json!({})), None),
            (
                Command::Pause,
                vmi("Succeeded", json!({})),
                Some((
                    409,
                    "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VM is not running",
                )),
            ),
            (
                Command::Pause,
                vmi("Running", paused.clone()),
                Some((
                    409,
                    "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VMI is already paused",
                )),
            ),
            (
                Command::Pause,
                vmi("Running", json!({"spec": {"livenessProbe": {"tcpSocket": {"port": 80}}}})),
                Some((
                    403,
                    "virtualmachineinstance.kubevirt.io \"vm1\" is forbidden: Pausing VMIs with LivenessProbe is currently not supported",
                )),
            ),
            (Command::Unpause, vmi("Running", paused), None),
            (
                Command::Unpause,
                vmi("Running", json!({})),
                Some((
                    409,
                    "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VMI is not paused",
                )),
            ),
        ];
        for (command, vmi, want) in cases {
            let got = check(command, &vmi).err().map(|r| (r.code, r.message));
            assert_eq!(got, want.map(|(c, m)| (c, m.to_owned())), "{command:?} on {:?}", vmi.status);
        }
        let agent = |sub: &str, v: &VirtualMachineInstance| {
            let r = guest_agent(sub, v);
            (r.code, r.message)
        };
        let prefix = "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": ";
        assert_eq!(
            agent("guestosinfo", &vmi("Running", json!({}))),
            (409, format!("{prefix}VMI does not have guest agent connected"))
        );
        assert_eq!(agent("freeze", &vmi("Scheduled", json!({}))), (409, format!("{prefix}VM is not running")));
        assert_eq!(agent("unfreeze", &vmi("Scheduled", json!({}))), (409, format!("{prefix}VMI is not running")));
        let connected = json!({"status": {"conditions": [{"type": "AgentConnected", "status": "True"}]}});
        assert_eq!(agent("userlist", &vmi("Running", connected)).0, 501);
        assert_eq!(vmi_not_found("x").message, "virtualmachineinstance.kubevirt.io \"x\" not found");
    }

    #[test]
    fn websocket_handshakes() {
        let mut h = HeaderMap::new();
        assert_eq!(handshake(&h).err().map(|r| r.code), Some(400));
        h.insert(hyper::header::CONNECTION, "keep-alive, Upgrade".parse().unwrap_or_else(|e| panic!("{e}")));
        h.insert(hyper::header::UPGRADE, "websocket".parse().unwrap_or_else(|e| panic!("{e}")));
        h.insert(hyper::header::SEC_WEBSOCKET_VERSION, "13".parse().unwrap_or_else(|e| panic!("{e}")));
        assert!(handshake(&h).is_err(), "no key");
        // RFC 6455 §1.3's example.
        h.insert(
            hyper::header::SEC_WEBSOCKET_KEY,
            "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h.insert(hyper::header::SEC_WEBSOCKET_PROTOCOL, "plain.kubevirt.io".parse().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(handshake(&h).ok(), Some(Handshake { accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into(), plain: true }));
    }
}
