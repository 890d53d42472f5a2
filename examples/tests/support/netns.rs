//! Pods on one machine: network namespaces, each with an IP address of
//! its own on a bridge in the test's namespace, as a Kubernetes node
//! gives its pods. The test reaches every pod through the bridge, and the
//! pods reach the test's servers (DNS) on the bridge's address.
//!
//! Addresses come from 198.18.0.0/15 (reserved for network tests, RFC
//! 2544), one /24 per test process, so that they meet no real network
//! and parallel runs do not meet each other.

use std::net::Ipv4Addr;
use std::process::Command;

/// A bridge and `pods` network namespaces on it; all removed when
/// dropped.
pub struct PodNetwork {
    bridge: String,
    subnet: [u8; 3],
    namespaces: Vec<String>,
}

/// Runs `ip ARGS`; its error output if it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("`ip` cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl PodNetwork {
    /// Makes the bridge and `pods` namespaces, each with a veth on the
    /// bridge, its address and loopback up. `Err` says why it cannot be
    /// done here (not root, no iproute2, no namespaces).
    pub fn create(pods: u8) -> Result<PodNetwork, String> {
        assert!((1..=250).contains(&pods));
        let pid = std::process::id();
        let subnet = [198, 18 + ((pid >> 8) & 1) as u8, pid as u8];
        // Interface names are at most 15 bytes.
        let tag = pid % 100_000;
        let mut network = PodNetwork {
            bridge: format!("tb{tag}"),
            subnet,
            namespaces: Vec::new(),
        };
        // Whatever an earlier process of the same id left.
        let _ = ip(&["link", "del", &network.bridge]);
        ip(&["link", "add", &network.bridge, "type", "bridge"])?;
        ip(&["link", "set", &network.bridge, "up"])?;
        let host = format!("{}/24", network.host_ip());
        ip(&["addr", "add", &host, "dev", &network.bridge])?;
        for n in 1..=pods {
            let netns = format!("troupe-{pid}-{n}");
            let _ = ip(&["netns", "del", &netns]);
            ip(&["netns", "add", &netns])?;
            network.namespaces.push(netns.clone());
            let outside = format!("tv{tag}o{n}");
            let inside = format!("tv{tag}i{n}");
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", &inside,
            ])?;
            ip(&["link", "set", &outside, "master", &network.bridge])?;
            ip(&["link", "set", &outside, "up"])?;
            ip(&["link", "set", &inside, "netns", &netns])?;
            let address = format!("{}/24", network.pod_ip(n));
            ip(&["-n", &netns, "addr", "add", &address, "dev", &inside])?;
            ip(&["-n", &netns, "link", "set", &inside, "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    /// The address of the test's side of the bridge.
    pub fn host_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 254)
    }

    /// The address of pod `n` (1-based).
    pub fn pod_ip(&self, n: u8) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, n)
    }

    /// The network namespace of pod `n` (1-based).
    pub fn netns(&self, n: u8) -> &str {
        &self.namespaces[usize::from(n) - 1]
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth and so the peer on the
        // bridge.
        for netns in &self.namespaces {
            if let Err(e) = ip(&["netns", "del", netns]) {
                eprintln!("{e}");
            }
        }
        if let Err(e) = ip(&["link", "del", &self.bridge]) {
            eprintln!("{e}");
        }
    }
}
