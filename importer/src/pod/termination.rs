//! The pod's termination protocol (`specs/cdi.md` §2.5, the message is [`TerminationMessage`]): success,
//! "scratch space required" and "checksum mismatch" end with exit 0 and a JSON line; every other failure with a
//! plain line and exit 1.

use std::collections::BTreeMap;

use contracts::cdi::TerminationMessage;
use contracts::cdi::consts::message;
use contracts::cdi::termination::failure_line;

use crate::{Error, ErrorKind};

/// The termination message and exit code of a pod run.
#[derive(Debug, Clone, PartialEq)]
pub struct Termination {
    /// The message written to the termination-log file.
    pub message: String,
    /// The process exit code.
    pub exit_code: u8,
}

impl Termination {
    /// A failure before anything ran (bad environment, no runtime): the line, exit 1.
    pub fn failed(line: &str) -> Termination {
        Termination { message: failure_line(line), exit_code: 1 }
    }
}

/// Maps image env entries containing `KUBEVIRT_IO_` to labels, as CDI does:
/// `INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small` → `instancetype.kubevirt.io/default-instancetype: u1.small`.
pub fn env_labels(env: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in env {
        let Some((name, value)) = e.split_once('=') else { continue };
        let Some(idx) = name.find("KUBEVIRT_IO_") else { continue };
        let prefix: Vec<String> =
            name[..idx].split('_').filter(|p| !p.is_empty()).map(|p| p.to_ascii_lowercase()).collect();
        let suffix = name[idx + "KUBEVIRT_IO_".len()..].replace('_', "-").to_ascii_lowercase();
        if suffix.is_empty() {
            continue;
        }
        let domain =
            if prefix.is_empty() { String::from("kubevirt.io") } else { format!("{}.kubevirt.io", prefix.join(".")) };
        out.insert(format!("{domain}/{suffix}"), value.to_string());
    }
    out
}

/// What a successful pod run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// Preallocation was applied.
    pub preallocated: bool,
    /// Registry image env (for labels).
    pub image_env: Vec<String>,
    /// A blank image was created (CDI's message then has no `scratchSpaceRequired`).
    pub blank: bool,
}

/// Turns an import result into CDI's termination protocol.
pub fn terminate(result: Result<Done, Error>, scratch_available: bool) -> Termination {
    let ok = |m: TerminationMessage| Termination { message: m.to_line(), exit_code: 0 };
    match result {
        Ok(Done { preallocated, image_env, blank }) => ok(TerminationMessage {
            scratch_space_required: (!blank).then_some(false),
            preallocation_applied: Some(preallocated),
            labels: env_labels(&image_env),
            ..TerminationMessage::text(message::IMPORT_COMPLETE)
        }),
        Err(e) => match e.kind() {
            ErrorKind::Checksum => ok(TerminationMessage::text(format!(
                "Unable to process data: checksum validation failed: {}",
                e.one_line()
            ))),
            ErrorKind::ScratchRequired if !scratch_available => ok(TerminationMessage {
                scratch_space_required: Some(true),
                preallocation_applied: Some(false),
                ..TerminationMessage::text(message::IMPORT_COMPLETE)
            }),
            ErrorKind::Connect => Termination::failed(&e.one_line()),
            // CDI's controller recognises a volume that is too small by the text: say it the way CDI does for
            // every capacity failure whose message does not already give the target's limit.
            ErrorKind::Capacity if !e.states_target_limit() => {
                Termination::failed(&format!("Unable to process data: {}: no space left on device", e.one_line()))
            }
            _ => Termination::failed(&format!("Unable to process data: {}", e.one_line())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_from_image_env() {
        let l = env_labels(&[
            "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small".into(),
            "TEST_KUBEVIRT_IO_TEST=testvalue".into(),
            "PATH=/bin".into(),
        ]);
        assert_eq!(l.get("instancetype.kubevirt.io/default-instancetype").map(String::as_str), Some("u1.small"));
        assert_eq!(l.get("test.kubevirt.io/test").map(String::as_str), Some("testvalue"));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn termination_protocol() {
        let ok = terminate(
            Ok(Done { preallocated: true, image_env: vec!["A_KUBEVIRT_IO_B=c".into()], blank: false }),
            false,
        );
        assert_eq!(ok.exit_code, 0);
        assert_eq!(
            ok.message,
            r#"{"scratchSpaceRequired":false,"preallocationApplied":true,"labels":{"a.kubevirt.io/b":"c"},"message":"Import Complete"}"#
        );
        let mismatch =
            terminate(Err(Error::ChecksumMismatch { expected: "md5:00".into(), calculated: "md5:11".into() }), false);
        assert_eq!(mismatch.exit_code, 0);
        assert_eq!(
            mismatch.message,
            r#"{"message":"Unable to process data: checksum validation failed: checksum mismatch: expected md5:00, calculated md5:11"}"#
        );
        let conn = terminate(
            Err(Error::Connect {
                kind: "http",
                url: "http://h/x".into(),
                message: "expected status code 200, got 404. Status: 404 Not Found".into(),
            }),
            false,
        );
        assert_eq!((conn.exit_code, conn.message.starts_with("Unable to connect to http data source: ")), (1, true));
        let big = terminate(Err(Error::TargetTooSmall { virtual_size: 10, available: 5 }), false);
        assert!(big.message.starts_with(
            "Unable to process data: virtual image size 10 is larger than the reported available storage 5"
        ));
        let too_large = terminate(Err(Error::FileTooLarge { requested: 70 << 40, max: 16 << 40 }), false);
        assert!(!too_large.message.contains("no space left on device"), "{}", too_large.message);
        let full = terminate(
            Err(Error::Sink { path: "/data/disk.img".into(), source: std::io::Error::from_raw_os_error(28) }),
            false,
        );
        assert!(full.message.ends_with(": no space left on device"), "{}", full.message);
        let blank = terminate(Ok(Done { blank: true, ..Done::default() }), false);
        assert_eq!(blank.message, r#"{"preallocationApplied":false,"message":"Import Complete"}"#);
        let scratch = terminate(Err(Error::ScratchRequired("x".into())), false);
        assert_eq!((scratch.exit_code, scratch.message.contains(r#""scratchSpaceRequired":true"#)), (0, true));
    }
}
