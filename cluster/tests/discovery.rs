//! Service discovery against a real DNS server on loopback (A, AAAA and
//! SRV records, changes to them, truncated answers, errors), and the
//! aggregate method falling through to DNS.

mod support;

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::dns_server::{DnsServer, Zone};
use troupe_cluster::discovery::*;
use troupe_core::rt;

const TIMEOUT: Duration = Duration::from_secs(3);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn zone() -> Zone {
    let mut z = Zone::default();
    z.ips.insert(
        "shop.test".into(),
        vec![ip("10.0.0.2"), ip("10.0.0.1"), ip("fd00::1")],
    );
    z.ips.insert("pod-a.shop.test".into(), vec![ip("10.0.0.1")]);
    z.ips.insert("pod-b.shop.test".into(), vec![ip("10.0.0.2")]);
    z.ips.insert("pod-c.shop.test".into(), vec![ip("10.0.0.3")]);
    z.srv.insert(
        "_management._tcp.shop.test".into(),
        vec![
            ("pod-a.shop.test".into(), 8558),
            ("pod-b.shop.test".into(), 8559),
        ],
    );
    z
}

fn lookup(d: &dyn ServiceDiscovery, l: Lookup) -> Result<Resolved, DiscoveryError> {
    rt::block_on(d.lookup(l, TIMEOUT))
}

fn hosts(r: &Resolved) -> Vec<(String, Option<u16>, Option<IpAddr>)> {
    r.targets
        .iter()
        .map(|t| (t.host.clone(), t.port, t.address))
        .collect()
}

#[test]
fn a_and_aaaa_records_resolve_and_follow_changes() {
    let server = DnsServer::start(zone());
    let dns = DnsServiceDiscovery::with_server(server.addr);
    let r = lookup(&dns, Lookup::new("shop.test")).unwrap();
    assert_eq!(r.service_name, "shop.test");
    assert_eq!(
        hosts(&r),
        vec![
            ("10.0.0.1".into(), None, Some(ip("10.0.0.1"))),
            ("10.0.0.2".into(), None, Some(ip("10.0.0.2"))),
            ("fd00::1".into(), None, Some(ip("fd00::1"))),
        ]
    );
    // A pod comes, one goes: the next lookup sees it.
    server.update(|z| {
        z.ips
            .insert("shop.test".into(), vec![ip("10.0.0.2"), ip("10.0.0.3")]);
    });
    let r = lookup(&dns, Lookup::new("shop.test")).unwrap();
    assert_eq!(
        r.targets
            .iter()
            .map(|t| t.host.as_str())
            .collect::<Vec<_>>(),
        vec!["10.0.0.2", "10.0.0.3"]
    );
    // Gone altogether: no such name is an empty answer, not an error.
    server.update(|z| {
        z.ips.remove("shop.test");
    });
    assert!(lookup(&dns, Lookup::new("shop.test"))
        .unwrap()
        .targets
        .is_empty());
    // A name ending with a dot is the same name.
    assert_eq!(
        lookup(&dns, Lookup::new("pod-a.shop.test."))
            .unwrap()
            .targets
            .len(),
        1
    );
}

#[test]
fn srv_records_resolve_with_ports_and_addresses_and_follow_changes() {
    let server = DnsServer::start(zone());
    let dns = DnsServiceDiscovery::with_server(server.addr);
    let srv = Lookup::new("shop.test")
        .with_port_name("management")
        .with_protocol("tcp");
    let r = lookup(&dns, srv.clone()).unwrap();
    assert_eq!(
        hosts(&r),
        vec![
            ("pod-a.shop.test".into(), Some(8558), Some(ip("10.0.0.1"))),
            ("pod-b.shop.test".into(), Some(8559), Some(ip("10.0.0.2"))),
        ]
    );
    server.update(|z| {
        z.srv.insert(
            "_management._tcp.shop.test".into(),
            vec![("pod-c.shop.test".into(), 9000)],
        );
    });
    let r = lookup(&dns, srv.clone()).unwrap();
    assert_eq!(
        hosts(&r),
        vec![("pod-c.shop.test".into(), Some(9000), Some(ip("10.0.0.3")))]
    );
    // Without a protocol it is an A lookup of the service name.
    let r = lookup(&dns, Lookup::new("shop.test").with_port_name("management")).unwrap();
    assert!(r.targets.iter().all(|t| t.port.is_none()));
    // An unknown SRV name: empty.
    let r = lookup(
        &dns,
        Lookup::new("other.test")
            .with_port_name("management")
            .with_protocol("tcp"),
    )
    .unwrap();
    assert!(r.targets.is_empty());
}

#[test]
fn truncated_answers_are_asked_again_over_tcp() {
    let mut z = zone();
    let many: Vec<IpAddr> = (1..=200).map(|i| ip(&format!("10.1.0.{i}"))).collect();
    z.ips.insert("big.test".into(), many.clone());
    z.truncate_over_udp.insert("big.test".into());
    let server = DnsServer::start(z);
    let dns = DnsServiceDiscovery::with_server(server.addr);
    let r = lookup(&dns, Lookup::new("big.test")).unwrap();
    assert_eq!(r.targets.len(), 200);
    assert!(server.tcp_queries.load(Ordering::SeqCst) >= 1);
}

#[test]
fn a_silent_server_is_a_timeout_and_garbage_is_dropped() {
    // A UDP socket that answers garbage, then nothing.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let garbage = std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        if let Ok((_, from)) = silent.recv_from(&mut buf) {
            let _ = silent.send_to(b"not dns at all", from);
        }
        // Keep the socket (and so the port) until the client gave up.
        std::thread::sleep(Duration::from_secs(2));
    });
    let dns = DnsServiceDiscovery::with_server(addr);
    let e =
        rt::block_on(dns.lookup(Lookup::new("shop.test"), Duration::from_millis(800))).unwrap_err();
    assert!(
        matches!(
            e,
            DiscoveryError::Timeout { .. } | DiscoveryError::Io { .. }
        ),
        "{e:?}"
    );
    garbage.join().unwrap();
}

#[test]
fn aggregate_falls_through_empty_and_failing_methods_to_dns() {
    let server = DnsServer::start(zone());
    let nowhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead = DnsServiceDiscovery::with_server(nowhere.local_addr().unwrap());
    let aggregate = AggregateServiceDiscovery::new(vec![
        Arc::new(ConfigServiceDiscovery::default()),
        Arc::new(dead),
        Arc::new(DnsServiceDiscovery::with_server(server.addr)),
    ]);
    let r = rt::block_on(aggregate.lookup(Lookup::new("pod-b.shop.test"), Duration::from_secs(1)))
        .unwrap();
    assert_eq!(r.targets[0].host, "10.0.0.2");
    // Every method failing: the error names each.
    let aggregate = AggregateServiceDiscovery::new(vec![Arc::new(
        DnsServiceDiscovery::with_server(nowhere.local_addr().unwrap()),
    )]);
    let e = rt::block_on(aggregate.lookup(Lookup::new("x.test"), Duration::from_millis(300)))
        .unwrap_err();
    assert!(
        matches!(&e, DiscoveryError::AllMethodsFailed(f) if f.len() == 1 && f[0].0 == "dns"),
        "{e:?}"
    );
}

#[test]
fn settings_build_a_dns_discovery_for_the_configured_server() {
    let server = DnsServer::start(zone());
    let settings = DiscoverySettings::from_toml(&format!(
        "[discovery]\nmethod = \"dns\"\n[discovery.dns]\nserver = \"{}\"\n",
        server.addr
    ))
    .unwrap();
    let d = settings.build().unwrap();
    let r = lookup(d.as_ref(), Lookup::new("pod-c.shop.test")).unwrap();
    assert_eq!(r.targets[0].address, Some(ip("10.0.0.3")));
    assert!(server.udp_queries.load(Ordering::SeqCst) >= 1);
}
