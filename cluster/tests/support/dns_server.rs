//! A small authoritative DNS server for tests, on loopback: answers A,
//! AAAA and SRV queries from a zone the test can change while it runs,
//! "no such name" for other names, over UDP and TCP. Names listed as
//! `truncate_over_udp` are answered truncated over UDP (so that the
//! client must ask again over TCP).

#![allow(dead_code)] // each test uses a part

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The zone: names (lower case, without the final dot) and their records.
#[derive(Debug, Default, Clone)]
pub struct Zone {
    pub ips: BTreeMap<String, Vec<IpAddr>>,
    /// SRV name -> (target, port).
    pub srv: BTreeMap<String, Vec<(String, u16)>>,
    pub truncate_over_udp: BTreeSet<String>,
}

pub struct DnsServer {
    pub addr: SocketAddr,
    pub zone: Arc<Mutex<Zone>>,
    /// Queries answered so far, over UDP and TCP.
    pub udp_queries: Arc<AtomicUsize>,
    pub tcp_queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn name_text(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_ascii_lowercase()
}

fn fqdn(text: &str) -> Name {
    Name::from_ascii(format!("{text}.")).unwrap()
}

fn answer(zone: &Zone, query: &Message, over_udp: bool) -> Message {
    let mut reply = Message::response(query.metadata.id, OpCode::Query);
    reply.metadata.message_type = MessageType::Response;
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    let Some(q) = query.queries.first() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return reply;
    };
    reply.add_query(q.clone());
    let name = name_text(&q.name);
    if over_udp && zone.truncate_over_udp.contains(&name) {
        reply.metadata.truncation = true;
        return reply;
    }
    let ip_records = |owner: &str, kind: RecordType| -> Vec<Record> {
        zone.ips
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|ip| match (ip, kind) {
                (IpAddr::V4(v4), RecordType::A) => {
                    Some(Record::from_rdata(fqdn(owner), 5, RData::A(A(*v4))))
                }
                (IpAddr::V6(v6), RecordType::AAAA) => {
                    Some(Record::from_rdata(fqdn(owner), 5, RData::AAAA(AAAA(*v6))))
                }
                _ => None,
            })
            .collect()
    };
    match q.query_type {
        RecordType::A | RecordType::AAAA if zone.ips.contains_key(&name) => {
            reply.add_answers(ip_records(&name, q.query_type));
        }
        RecordType::SRV if zone.srv.contains_key(&name) => {
            for (target, port) in &zone.srv[&name] {
                reply.add_answer(Record::from_rdata(
                    fqdn(&name),
                    5,
                    RData::SRV(SRV::new(0, 10, *port, fqdn(target))),
                ));
                reply.add_additionals(ip_records(target, RecordType::A));
                reply.add_additionals(ip_records(target, RecordType::AAAA));
            }
        }
        _ if zone.ips.contains_key(&name) || zone.srv.contains_key(&name) => {}
        _ => reply.metadata.response_code = ResponseCode::NXDomain,
    }
    reply
}

impl DnsServer {
    /// Starts a server on 127.0.0.1, a port chosen by the OS (the same
    /// for UDP and TCP).
    pub fn start(zone: Zone) -> DnsServer {
        DnsServer::start_on(IpAddr::from([127, 0, 0, 1]), zone)
    }

    /// Starts a server on `ip` (e.g. a bridge that network namespaces
    /// reach), a port chosen by the OS (the same for UDP and TCP).
    pub fn start_on(ip: IpAddr, zone: Zone) -> DnsServer {
        // Find a port free for both UDP and TCP.
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind((ip, 0)).unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind((ip, port)) {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().unwrap();
        let zone = Arc::new(Mutex::new(zone));
        let stop = Arc::new(AtomicBool::new(false));
        let udp_queries = Arc::new(AtomicUsize::new(0));
        let tcp_queries = Arc::new(AtomicUsize::new(0));
        udp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        {
            let (zone, stop, count) = (zone.clone(), stop.clone(), udp_queries.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((n, from)) = udp.recv_from(&mut buf) else {
                        continue;
                    };
                    let Ok(query) = Message::from_vec(&buf[..n]) else {
                        continue;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    let reply = answer(&zone.lock().unwrap(), &query, true);
                    let _ = udp.send_to(&reply.to_vec().unwrap(), from);
                }
            });
        }
        tcp.set_nonblocking(true).unwrap();
        {
            let (zone, stop, count) = (zone.clone(), stop.clone(), tcp_queries.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((mut stream, _)) = tcp.accept() else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    stream.set_nonblocking(false).unwrap();
                    let mut len = [0u8; 2];
                    if stream.read_exact(&mut len).is_err() {
                        continue;
                    }
                    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if stream.read_exact(&mut body).is_err() {
                        continue;
                    }
                    let Ok(query) = Message::from_vec(&body) else {
                        continue;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    let reply = answer(&zone.lock().unwrap(), &query, false)
                        .to_vec()
                        .unwrap();
                    let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&reply);
                    let _ = stream.write_all(&framed);
                }
            });
        }
        DnsServer {
            addr,
            zone,
            udp_queries,
            tcp_queries,
            stop,
        }
    }

    /// Changes the zone.
    pub fn update(&self, f: impl FnOnce(&mut Zone)) {
        f(&mut self.zone.lock().unwrap());
    }
}
