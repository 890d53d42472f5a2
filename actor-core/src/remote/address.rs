//! Node addresses (`troupe://SYSTEM@HOST:PORT`) and remote actor paths.

use std::fmt;
use std::str::FromStr;

/// The protocol prefix of every Troupe address.
pub const PROTOCOL: &str = "troupe";

/// The address of an actor system reachable over the network:
/// `troupe://SYSTEM@HOST:PORT`.
///
/// ```
/// use troupe_core::remote::Address;
///
/// let a: Address = "troupe://shop@127.0.0.1:2552".parse().unwrap();
/// assert_eq!(a.system(), "shop");
/// assert_eq!(a.port(), 2552);
/// assert_eq!(a.to_string(), "troupe://shop@127.0.0.1:2552");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    system: String,
    host: String,
    port: u16,
}

/// Why a text is not an address or a remote path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressError(String);

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AddressError {}

impl Address {
    /// An address from its parts.
    pub fn new(system: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Address {
            system: system.into(),
            host: host.into(),
            port,
        }
    }

    /// The actor system's name.
    pub fn system(&self) -> &str {
        &self.system
    }

    /// The host name or IP address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, for connecting.
    pub fn socket_addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PROTOCOL}://{}@{}", self.system, self.socket_addr())
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        let bad = |why: &str| {
            AddressError(format!(
                "`{s}` is not a Troupe address ({why}); expected troupe://SYSTEM@HOST:PORT"
            ))
        };
        let rest = s
            .strip_prefix(PROTOCOL)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(|| bad("it must start with troupe://"))?;
        let (system, hostport) = rest.split_once('@').ok_or_else(|| bad("no `@`"))?;
        if system.is_empty()
            || !system
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("bad system name"));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, p) = v6.split_once("]:").ok_or_else(|| bad("bad IPv6 host"))?;
            (h, p)
        } else {
            hostport.rsplit_once(':').ok_or_else(|| bad("no port"))?
        };
        if host.is_empty() || host.contains('/') {
            return Err(bad("bad host"));
        }
        let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
        Ok(Address::new(system, host, port))
    }
}

/// A full remote actor path: address, path within the system, and the
/// actor's uid (0 when any incarnation will do).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RemotePath {
    pub(crate) address: Address,
    pub(crate) path: String,
    pub(crate) uid: u64,
}

impl RemotePath {
    /// Parses `troupe://sys@host:port/user/a[#uid]`.
    pub(crate) fn parse(s: &str) -> Result<Self, AddressError> {
        let bad = |why: &str| {
            AddressError(format!("`{s}` is not a remote actor path ({why}); expected troupe://SYSTEM@HOST:PORT/user/NAME"))
        };
        let after = s
            .strip_prefix(PROTOCOL)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(|| bad("it must start with troupe://"))?;
        let slash = after.find('/').ok_or_else(|| bad("no actor path"))?;
        let split = PROTOCOL.len() + 3 + slash;
        let address: Address = s[..split].parse()?;
        let (path, uid) = match s[split..].split_once('#') {
            Some((p, u)) => (p, u.parse::<u64>().map_err(|_| bad("bad uid"))?),
            None => (&s[split..], 0),
        };
        if path.len() < 2 || path.contains("//") || path.ends_with('/') {
            return Err(bad("bad actor path"));
        }
        Ok(RemotePath {
            address,
            path: path.to_string(),
            uid,
        })
    }
}

impl fmt::Display for RemotePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.address, self.path)?;
        if self.uid != 0 {
            write!(f, "#{}", self.uid)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for s in [
            "troupe://a@127.0.0.1:1",
            "troupe://sys-1@example.org:65535",
            "troupe://s@[::1]:2552",
        ] {
            let a: Address = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        for s in [
            "akka://a@h:1",
            "troupe://@h:1",
            "troupe://a@h",
            "troupe://a@:1",
            "troupe://a@h:99999",
            "troupe://a b@h:1",
        ] {
            assert!(s.parse::<Address>().is_err(), "{s}");
        }
    }

    #[test]
    fn paths_round_trip() {
        let p = RemotePath::parse("troupe://s@h:1/user/a/b#42").unwrap();
        assert_eq!(p.address, Address::new("s", "h", 1));
        assert_eq!(p.path, "/user/a/b");
        assert_eq!(p.uid, 42);
        assert_eq!(p.to_string(), "troupe://s@h:1/user/a/b#42");
        let p = RemotePath::parse("troupe://s@[::1]:1/user/x").unwrap();
        assert_eq!(p.uid, 0);
        assert_eq!(p.to_string(), "troupe://s@[::1]:1/user/x");
        for s in [
            "troupe://s@h:1",
            "troupe://s@h:1/",
            "troupe://s@h:1/user/#x",
        ] {
            assert!(RemotePath::parse(s).is_err(), "{s}");
        }
    }
}
