//! The transfer detail a worker (importer, clone target, upload server) exports beside CDI's percentage, and
//! the DataVolume controller turns into the Running condition's message (what `kubectl get dv` shows in its
//! `Transfer` column): bytes done / total, rate and time left of the stage that runs.
//!
//! Wire form, on the worker's metrics endpoint, every line labelled exactly `{ownerUID="<uid>",stage="<stage>"}`:
//!
//! ```text
//! kubevirt_rs_transfer_bytes_done{ownerUID="u",stage="transferring"} 536870912
//! kubevirt_rs_transfer_bytes_total{ownerUID="u",stage="transferring"} 1073741824     (absent: unknown)
//! kubevirt_rs_transfer_percent{ownerUID="u",stage="converting"} 45.6                 (absent: no percentage)
//! kubevirt_rs_transfer_bytes_per_second{ownerUID="u",stage="transferring"} 89478485  (absent: no rate yet)
//! kubevirt_rs_transfer_eta_seconds{ownerUID="u",stage="transferring"} 6              (absent: unknown)
//! ```
//!
//! Both sides use [`TransferStatus::render`] and [`TransferStatus::parse`]; nothing else spells these names.

use std::fmt::Write as _;

const DONE: &str = "kubevirt_rs_transfer_bytes_done";
const TOTAL: &str = "kubevirt_rs_transfer_bytes_total";
const PERCENT: &str = "kubevirt_rs_transfer_percent";
const RATE: &str = "kubevirt_rs_transfer_bytes_per_second";
const ETA: &str = "kubevirt_rs_transfer_eta_seconds";

/// What the worker is doing (a closed set; the label value is [`Stage::label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Opening the source, detecting formats.
    Probing,
    /// Reading the source and writing the volume in one pass (download and conversion at once).
    Transferring,
    /// Copying the source to scratch space (formats that need random access from a source without it).
    Downloading,
    /// Converting from scratch space (`qemu-img`: a percentage, no byte counts).
    Converting,
    /// Re-reading pieces the stream delivered before the metadata that maps them.
    Resolving,
    /// Growing, preallocating and syncing the volume.
    Syncing,
}

impl Stage {
    const ALL: [Stage; 6] =
        [Stage::Probing, Stage::Transferring, Stage::Downloading, Stage::Converting, Stage::Resolving, Stage::Syncing];

    /// The label value (also the first word of [`TransferStatus::message`]).
    pub fn label(self) -> &'static str {
        match self {
            Stage::Probing => "probing",
            Stage::Transferring => "transferring",
            Stage::Downloading => "downloading to scratch",
            Stage::Converting => "converting",
            Stage::Resolving => "resolving",
            Stage::Syncing => "syncing",
        }
    }

    fn from_label(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.label() == s)
    }
}

/// One observation of a running transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferStatus {
    /// The stage that runs.
    pub stage: Stage,
    /// Bytes of this stage done (source bytes read while transferring or downloading).
    pub done: u64,
    /// Bytes of this stage in all, when known (the source's length).
    pub total: Option<u64>,
    /// Percentage 0–100 of this stage when there are no byte counts (`qemu-img` converting) or when known.
    pub percent: Option<f64>,
    /// Recent rate in bytes per second.
    pub bytes_per_second: Option<f64>,
    /// Seconds left in this stage at the recent rate.
    pub eta_seconds: Option<u64>,
}

impl TransferStatus {
    /// The metric lines for the worker owned by `owner_uid` (Prometheus text, `# TYPE` lines included).
    pub fn render(&self, owner_uid: &str) -> String {
        let labels = format!("{{ownerUID=\"{}\",stage=\"{}\"}}", escape(owner_uid), self.stage.label());
        let mut out = String::new();
        let mut line = |name: &str, help: &str, value: String| {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{labels} {value}\n");
        };
        line(DONE, "Bytes done in the current transfer stage", self.done.to_string());
        if let Some(t) = self.total {
            line(TOTAL, "Bytes in the current transfer stage", t.to_string());
        }
        if let Some(p) = self.percent.filter(|p| p.is_finite()) {
            line(PERCENT, "Percentage of the current transfer stage", format!("{:.2}", p.clamp(0.0, 100.0)));
        }
        if let Some(r) = self.bytes_per_second.filter(|r| r.is_finite() && *r >= 0.0) {
            line(RATE, "Recent transfer rate", format!("{r:.0}"));
        }
        if let Some(e) = self.eta_seconds {
            line(ETA, "Seconds left in the current transfer stage at the recent rate", e.to_string());
        }
        out
    }

    /// Reads the lines [`render`](Self::render) wrote for `owner_uid` out of a metrics page; `None` without a
    /// `bytes_done` line for that owner (a worker without the detail, or another owner's).
    pub fn parse(text: &str, owner_uid: &str) -> Option<TransferStatus> {
        let prefix = format!("{{ownerUID=\"{}\",stage=\"", escape(owner_uid));
        let mut stage = None;
        let mut st = TransferStatus {
            stage: Stage::Probing,
            done: 0,
            total: None,
            percent: None,
            bytes_per_second: None,
            eta_seconds: None,
        };
        for line in text.lines() {
            let Some(brace) = line.find('{') else { continue };
            let (name, labels) = line.split_at(brace);
            let Some(rest) = labels.strip_prefix(&prefix) else { continue };
            let Some((label, value)) = rest.split_once("\"} ") else { continue };
            let Some(s) = Stage::from_label(label) else { continue };
            let value = value.trim();
            match name {
                DONE => {
                    st.done = value.parse().ok()?;
                    stage = Some(s);
                }
                TOTAL => st.total = value.parse().ok(),
                PERCENT => st.percent = value.parse().ok().filter(|p: &f64| p.is_finite()),
                RATE => st.bytes_per_second = value.parse().ok().filter(|r: &f64| r.is_finite() && *r >= 0.0),
                ETA => st.eta_seconds = value.parse().ok(),
                _ => {}
            }
        }
        st.stage = stage?;
        Some(st)
    }

    /// The human form, e.g. `transferring 512.0 MiB of 1.0 GiB (50.00%), 85.3 MiB/s, 6s left` or
    /// `converting (45.60%), 20s left`.
    pub fn message(&self) -> String {
        let mut m = String::from(self.stage.label());
        let percent =
            self.percent.or_else(|| self.total.filter(|&t| t > 0).map(|t| self.done.min(t) as f64 * 100.0 / t as f64));
        match (self.stage, self.total) {
            (Stage::Converting | Stage::Probing, _) => {}
            (_, Some(t)) => {
                let _ = write!(m, " {} of {}", human_bytes(self.done), human_bytes(t));
            }
            (_, None) => {
                let _ = write!(m, " {}", human_bytes(self.done));
            }
        }
        if let Some(p) = percent {
            let _ = write!(m, " ({p:.2}%)");
        }
        if let Some(r) = self.bytes_per_second.filter(|_| self.stage != Stage::Converting) {
            let _ = write!(m, ", {}/s", human_bytes(r as u64));
        }
        if let Some(e) = self.eta_seconds {
            let _ = write!(m, ", {} left", human_duration(e));
        }
        m
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `1.5 GiB`-style binary units with one decimal (`512 B` below a KiB).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// `45s`, `2m05s`, `1h02m`.
pub fn human_duration(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> TransferStatus {
        TransferStatus {
            stage: Stage::Transferring,
            done: 512 << 20,
            total: Some(1 << 30),
            percent: None,
            bytes_per_second: Some(85.3 * 1048576.0),
            eta_seconds: Some(6),
        }
    }

    #[test]
    fn renders_parses_and_reads_as_a_sentence() {
        let st = full();
        let text = format!("# other\nkubevirt_cdi_import_progress_total{{ownerUID=\"u1\"}} 50.00\n{}", st.render("u1"));
        let back = TransferStatus::parse(&text, "u1").unwrap_or_else(|| panic!("no detail in {text}"));
        assert_eq!(back.stage, Stage::Transferring);
        assert_eq!((back.done, back.total, back.eta_seconds), (512 << 20, Some(1 << 30), Some(6)));
        assert_eq!(back.message(), "transferring 512.0 MiB of 1.0 GiB (50.00%), 85.3 MiB/s, 6s left");
        assert_eq!(TransferStatus::parse(&text, "u2"), None, "another owner's lines");
    }

    #[test]
    fn unknown_parts_are_left_out() {
        let st = TransferStatus { total: None, bytes_per_second: None, eta_seconds: None, ..full() };
        let back = TransferStatus::parse(&st.render("u"), "u").unwrap_or_else(|| panic!("parse"));
        assert_eq!(back.message(), "transferring 512.0 MiB");
        let conv = TransferStatus {
            stage: Stage::Converting,
            done: 0,
            total: None,
            percent: Some(45.6),
            bytes_per_second: None,
            eta_seconds: Some(125),
        };
        let back = TransferStatus::parse(&conv.render("u"), "u").unwrap_or_else(|| panic!("parse"));
        assert_eq!(back.message(), "converting (45.60%), 2m05s left");
        let dl = TransferStatus { stage: Stage::Downloading, eta_seconds: Some(7300), ..full() };
        assert_eq!(
            TransferStatus::parse(&dl.render("u"), "u").map(|s| s.message()).as_deref(),
            Some("downloading to scratch 512.0 MiB of 1.0 GiB (50.00%), 85.3 MiB/s, 2h01m left")
        );
    }

    #[test]
    fn hostile_pages_do_not_parse_into_nonsense() {
        assert_eq!(TransferStatus::parse("", "u"), None);
        let bad = "kubevirt_rs_transfer_bytes_done{ownerUID=\"u\",stage=\"warp\"} 5\n";
        assert_eq!(TransferStatus::parse(bad, "u"), None, "unknown stage");
        let nan = "kubevirt_rs_transfer_bytes_done{ownerUID=\"u\",stage=\"syncing\"} NaN\n";
        assert_eq!(TransferStatus::parse(nan, "u"), None);
        let quote = TransferStatus { ..full() }.render("a\"b");
        assert!(TransferStatus::parse(&quote, "a\"b").is_some());
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }
}
