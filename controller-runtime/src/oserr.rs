//! OS errors in the words upstream's Go binaries print them, for texts users and scripts compare against.

/// Go's text of an OS error (`connection refused`, `address already in use`): Rust's message without its
/// ` (os error N)` suffix and with a lower-case first letter, as Go's `syscall.Errno` strings are.
pub fn go_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    let s = s.split(" (os error").next().unwrap_or_default();
    let mut c = s.chars();
    c.next().map(|f| f.to_lowercase().chain(c).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_read_as_gos() {
        let e = std::io::Error::from_raw_os_error(111);
        assert_eq!(go_text(&e), "connection refused");
        let e = std::io::Error::from_raw_os_error(98);
        assert_eq!(go_text(&e), "address already in use");
    }
}
