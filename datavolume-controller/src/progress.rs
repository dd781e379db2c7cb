//! Reads a worker's progress the way CDI's controller does (`specs/cdi.md` §2.4): GET
//! `https://<podIP>:<metrics port>/metrics` without certificate verification, 2 s timeout, and pick the value of
//! a progress metric whose only label is `ownerUID="<uid>"`; beside it, our workers' transfer detail
//! ([`TransferStatus`]: bytes, rate, time left), which the status shows as the Running condition's message.

use std::time::Duration;

use contracts::cdi::transfer::TransferStatus;
use crds::cdi::consts::PROGRESS_METRICS;

/// What one scrape found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scraped {
    /// CDI's `progress` (`45.67%`).
    pub percent: Option<String>,
    /// The transfer detail, from workers that export it.
    pub transfer: Option<TransferStatus>,
}

/// The HTTPS client used for scraping (no certificate verification: workers use self-signed certificates).
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().tls_danger_accept_invalid_certs(true).timeout(Duration::from_secs(2)).no_proxy().build()
}

/// Finds `<metric>{ownerUID="<uid>"} <value>` for one of CDI's progress metrics and formats it as `%.2f%%`.
pub fn parse(text: &str, owner_uid: &str) -> Option<String> {
    let label = format!("{{ownerUID=\"{owner_uid}\"}} ");
    text.lines().find_map(|line| {
        let rest = PROGRESS_METRICS.iter().find_map(|m| line.strip_prefix(m))?;
        let value = rest.strip_prefix(&label)?;
        let v: f64 = value.split_whitespace().next()?.parse().ok()?;
        // Like upstream's populator, hold back values starting with 100 until the worker is done: the
        // controller itself reports `100.0%` on success.
        (v.is_finite() && (0.0..100.0).contains(&v)).then(|| format!("{v:.2}%"))
    })
}

/// Scrapes `https://<ip>:<port>/metrics`; nothing on any error (connection refused is normal while a pod starts).
pub async fn scrape(client: &reqwest::Client, ip: &str, port: i32, owner_uid: &str) -> Scraped {
    let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() };
    let text = async {
        let resp = client.get(format!("https://{host}:{port}/metrics")).send().await.ok()?;
        resp.error_for_status().ok()?.text().await.ok()
    }
    .await;
    match text {
        Some(text) => Scraped { percent: parse(&text, owner_uid), transfer: TransferStatus::parse(&text, owner_uid) },
        None => Scraped::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_the_owner_line() {
        let text = "# HELP x\nkubevirt_cdi_import_progress_total{ownerUID=\"other\"} 99\n\
                    kubevirt_cdi_import_progress_total{ownerUID=\"u1\"} 45.678\n";
        assert_eq!(parse(text, "u1").as_deref(), Some("45.68%"));
        assert_eq!(parse(text, "u2"), None);
        let upload = "kubevirt_cdi_upload_progress_total{ownerUID=\"u1\"} 3\n";
        assert_eq!(parse(upload, "u1").as_deref(), Some("3.00%"));
        let extra_label = "kubevirt_cdi_import_progress_total{ownerUID=\"u1\",x=\"y\"} 3\n";
        assert_eq!(parse(extra_label, "u1"), None);
        assert_eq!(parse("kubevirt_cdi_import_progress_total{ownerUID=\"u1\"} NaN\n", "u1"), None);
        assert_eq!(parse("kubevirt_cdi_import_progress_total{ownerUID=\"u1\"} 100\n", "u1"), None);
    }
}
