//! The local servers (the plotter's page, the Foxglove bridge): on 127.0.0.1, and only for
//! whoever has their token.

use std::net::SocketAddr;

/// 128 random bits, hex: other local users can reach 127.0.0.1 but cannot read the URL the
/// server printed, so they are refused (the bus itself is private to its user; so is its data).
pub(crate) fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A server on 127.0.0.1 that serves only requests carrying its token.
#[derive(Debug)]
pub struct LocalServer {
    scheme: &'static str,
    addr: SocketAddr,
    token: String,
}

impl LocalServer {
    pub(crate) fn new(scheme: &'static str, addr: SocketAddr, token: String) -> LocalServer {
        LocalServer {
            scheme,
            addr,
            token,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The secret every request must carry (`?token=`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// `SCHEME://127.0.0.1:PORT/?token=…`: for whoever has this URL.
    pub fn url(&self) -> String {
        format!("{}://{}/?token={}", self.scheme, self.addr, self.token)
    }
}
