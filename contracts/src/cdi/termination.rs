//! The worker termination message (`/dev/termination-log`, `specs/cdi.md` §2.5): written by the importer and the
//! upload server, read by the transfer reconciler from the container's terminated state.
//!
//! Success (and the two protocol answers "scratch space required" and "checksum mismatch", both exit 0) is one
//! line of JSON ([`TerminationMessage`], keys in CDI's order, absent ones omitted); any other failure is a plain
//! text line with exit 1 ([`failure_line`]). Every message is one line of at most [`MAX_LEN`] bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::consts::message;

/// Longest termination message (bytes); longer ones are cut on a character boundary.
pub const MAX_LEN: usize = 4096;

/// The JSON termination message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminationMessage {
    /// The importer needs a scratch volume (the controller retries with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_space_required: Option<bool>,
    /// The target was preallocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preallocation_applied: Option<bool>,
    /// The upload server's deadline passed without an upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_passed: Option<bool>,
    /// Labels for the PVC (from a registry image's environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `Import Complete`, `Upload Complete`, `Deadline Passed`, or the checksum failure.
    #[serde(default)]
    pub message: String,
}

impl TerminationMessage {
    /// A message carrying only `message`.
    pub fn text(message: impl Into<String>) -> TerminationMessage {
        TerminationMessage { message: message.into(), ..Default::default() }
    }

    /// The line the worker writes.
    pub fn to_line(&self) -> String {
        let json =
            serde_json::to_string(self).unwrap_or_else(|_| serde_json::json!({ "message": self.message }).to_string());
        failure_line(&json)
    }

    /// Reads what a worker wrote: its JSON form, or for a plain text line a message carrying the line.
    pub fn parse(raw: &str) -> TerminationMessage {
        serde_json::from_str(raw.trim()).unwrap_or_else(|_| TerminationMessage::text(first_line(raw)))
    }

    /// The checksum of the source did not match: a fatal failure reported with exit 0 (CDI's protocol: the
    /// controller recognises the message).
    pub fn is_checksum_failure(&self) -> bool {
        self.message.contains(message::CHECKSUM_MISMATCH)
    }

    /// The target was preallocated (the field, or a legacy plain message saying so).
    pub fn preallocated(&self) -> bool {
        self.preallocation_applied == Some(true) || self.message.contains(message::PREALLOCATION_APPLIED)
    }
}

/// The Running condition's message for a worker failure `msg`: every "volume too small" text (a worker's
/// `is larger than the reported available`, `no space left on device`, …) becomes CDI's
/// [`message::TOO_SMALL`], as upstream reports it.
pub fn simplify_failure(msg: &str) -> String {
    if message::TOO_SMALL_MARKERS.iter().any(|m| msg.contains(m)) {
        message::TOO_SMALL.to_owned()
    } else {
        msg.to_owned()
    }
}

/// A message as one line: trimmed, newlines as spaces.
pub fn first_line(s: &str) -> String {
    s.trim().replace('\n', " ")
}

/// A plain text termination line: line breaks become spaces, cut to [`MAX_LEN`] bytes on a character boundary.
pub fn failure_line(s: &str) -> String {
    let mut s = s.replace(['\n', '\r'], " ");
    if s.len() > MAX_LEN {
        let mut cut = MAX_LEN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keys_in_cdis_order_and_absent_ones_omitted() {
        let m = TerminationMessage {
            scratch_space_required: Some(false),
            preallocation_applied: Some(true),
            labels: BTreeMap::from([("a.kubevirt.io/b".to_owned(), "c".to_owned())]),
            message: message::IMPORT_COMPLETE.into(),
            ..Default::default()
        };
        assert_eq!(
            m.to_line(),
            r#"{"scratchSpaceRequired":false,"preallocationApplied":true,"labels":{"a.kubevirt.io/b":"c"},"message":"Import Complete"}"#
        );
        let deadline =
            TerminationMessage { deadline_passed: Some(true), ..TerminationMessage::text("Deadline Passed") };
        assert_eq!(deadline.to_line(), r#"{"deadlinePassed":true,"message":"Deadline Passed"}"#);
        assert_eq!(TerminationMessage::parse(&m.to_line()), m);
    }

    #[test]
    fn plain_lines_are_messages_and_protocol_answers_are_recognised() {
        let p = TerminationMessage::parse("Unable to connect to http data source: 404\nmore\n");
        assert_eq!(p, TerminationMessage::text("Unable to connect to http data source: 404 more"));
        let c = TerminationMessage::parse(
            r#"{"message":"Unable to process data: checksum validation failed: checksum mismatch: expected md5:00, calculated md5:11"}"#,
        );
        assert!(c.is_checksum_failure() && !c.preallocated());
        assert!(TerminationMessage::parse("Import Complete, Preallocation applied").preallocated());
        let long = failure_line(&"é".repeat(3000));
        assert!(long.len() <= MAX_LEN && long.len() > MAX_LEN - 2);
        assert_eq!(failure_line("a\r\nb"), "a  b");
        assert_eq!(
            simplify_failure("Unable to process data: x: no space left on device"),
            "DataVolume too small to contain image"
        );
        assert_eq!(simplify_failure("Unable to connect"), "Unable to connect");
    }

    #[test]
    fn too_small_messages_are_simplified() {
        let simplify_message = simplify_failure;
        assert_eq!(
            simplify_message(
                "Unable to process data: virtual image size 2 is larger than the reported available storage 1. A larger PVC is required"
            ),
            "DataVolume too small to contain image"
        );
        assert_eq!(simplify_message("write: no space left on device"), "DataVolume too small to contain image");
        assert_eq!(simplify_message("other"), "other");
    }
}
