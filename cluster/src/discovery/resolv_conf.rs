//! The system's DNS configuration, from `/etc/resolv.conf`: its name
//! servers, search domains and `ndots`.

use std::net::{IpAddr, SocketAddr};

/// The parts of `resolv.conf` a stub resolver needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvConf {
    /// The `nameserver` lines, port 53.
    pub(crate) servers: Vec<SocketAddr>,
    /// The `search` (or `domain`) list.
    pub(crate) search: Vec<String>,
    /// `options ndots:N`: a name with fewer dots is tried with the search
    /// domains first. Default 1.
    pub(crate) ndots: usize,
}

impl Default for ResolvConf {
    fn default() -> Self {
        ResolvConf {
            servers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
        }
    }
}

impl ResolvConf {
    /// Reads `/etc/resolv.conf` (an unreadable file is an empty
    /// configuration).
    pub(crate) fn system() -> ResolvConf {
        match std::fs::read_to_string("/etc/resolv.conf") {
            Ok(text) => ResolvConf::parse(&text),
            Err(e) => {
                tracing::debug!("cannot read /etc/resolv.conf: {e}");
                ResolvConf::default()
            }
        }
    }

    /// Parses the text of a `resolv.conf`; lines it does not understand
    /// are skipped.
    pub(crate) fn parse(text: &str) -> ResolvConf {
        let mut conf = ResolvConf::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or_default();
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    // A zone index (fe80::1%eth0) cannot be parsed as an
                    // IpAddr; such servers are skipped.
                    if let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) {
                        conf.servers.push(SocketAddr::new(ip, 53));
                    }
                }
                Some("search") | Some("domain") => {
                    conf.search = words
                        .map(|w| w.trim_end_matches('.').to_string())
                        .filter(|w| !w.is_empty())
                        .collect();
                }
                Some("options") => {
                    for option in words {
                        if let Some(n) = option.strip_prefix("ndots:") {
                            if let Ok(n) = n.parse::<usize>() {
                                conf.ndots = n.min(15);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        conf
    }

    /// The names to try for `name`, in order (as glibc's resolver): a name
    /// ending in `.` only as it is; one with at least `ndots` dots as it
    /// is, then with each search domain; else with the search domains
    /// first.
    pub(crate) fn candidates(&self, name: &str) -> Vec<String> {
        if let Some(absolute) = name.strip_suffix('.') {
            return vec![absolute.to_string()];
        }
        let searched = self.search.iter().map(|d| format!("{name}.{d}"));
        if name.matches('.').count() >= self.ndots {
            std::iter::once(name.to_string()).chain(searched).collect()
        } else {
            searched.chain(std::iter::once(name.to_string())).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_servers_search_and_ndots() {
        let conf = ResolvConf::parse(
            "# kubernetes\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\nnameserver ::1\n\
             search default.svc.cluster.local svc.cluster.local\noptions ndots:5 timeout:2\n",
        );
        assert_eq!(
            conf.servers,
            vec![
                "10.96.0.10:53".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
        assert_eq!(conf.search.len(), 2);
        assert_eq!(conf.ndots, 5);
        assert_eq!(
            conf.candidates("shop"),
            vec![
                "shop.default.svc.cluster.local",
                "shop.svc.cluster.local",
                "shop"
            ]
        );
        assert_eq!(conf.candidates("a.b.c.d.e.f")[0], "a.b.c.d.e.f");
        assert_eq!(conf.candidates("shop.local."), vec!["shop.local"]);
    }

    #[test]
    fn defaults_when_empty() {
        let conf = ResolvConf::parse("garbage line\n");
        assert!(conf.servers.is_empty());
        assert_eq!(conf.ndots, 1);
        assert_eq!(conf.candidates("shop.local"), vec!["shop.local"]);
        assert_eq!(conf.candidates("shop"), vec!["shop"]);
    }
}
