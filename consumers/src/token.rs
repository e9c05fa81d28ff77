//! The secret of the local servers (the plotter's page, the Foxglove bridge).

/// 128 random bits, hex: other local users can reach 127.0.0.1 but cannot read the URL the
/// server printed, so they are refused (the bus itself is private to its user; so is its data).
pub(crate) fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
