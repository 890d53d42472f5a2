//! The `dns` method: A/AAAA and SRV lookups with a small stub resolver
//! over the runtime's UDP (and TCP, for truncated answers), with
//! messages built and parsed by hickory-proto. Nothing blocks an executor
//! thread.

use super::resolv_conf::ResolvConf;
use super::{DiscoveryError, Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_core::rt;

/// The largest answer accepted over UDP (announced with EDNS).
const UDP_PAYLOAD: u16 = 4096;
/// How long one query to one server may take before the next try.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Tries per server.
const ATTEMPTS: usize = 2;

/// Which DNS servers to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameServers {
    /// The system's: the `nameserver`, `search` and `ndots` of
    /// `/etc/resolv.conf`, read when the discovery is created.
    System,
    /// This server (`HOST:PORT`), asked for names as they are (no search
    /// domains): for tests, and for clusters with a DNS server of their
    /// own.
    Given(SocketAddr),
}

/// Service discovery through DNS (Akka's `dns` method).
///
/// A [`Lookup`] with a port name and a protocol is an SRV lookup of
/// `_<port-name>._<protocol>.<service-name>`: each SRV record is a target
/// with the record's target host and port, and its address from the
/// answer's additional records (or from an A/AAAA lookup of the target).
/// Any other lookup asks for the A and AAAA records of the service name:
/// each address is a target without a port (host = the address).
///
/// "No such name" is an empty answer; a server error, a socket error or a
/// timeout is a [`DiscoveryError`].
#[derive(Debug, Clone)]
pub struct DnsServiceDiscovery {
    servers: NameServers,
    conf: Arc<ResolvConf>,
}

impl DnsServiceDiscovery {
    /// Discovery through `servers`.
    pub fn new(servers: NameServers) -> Self {
        let conf = match &servers {
            NameServers::System => ResolvConf::system(),
            NameServers::Given(server) => ResolvConf {
                servers: vec![*server],
                search: Vec::new(),
                ndots: 0,
            },
        };
        DnsServiceDiscovery {
            servers,
            conf: Arc::new(conf),
        }
    }

    /// Discovery through the system's DNS servers.
    pub fn system() -> Self {
        DnsServiceDiscovery::new(NameServers::System)
    }

    /// Discovery through the DNS server at `server`.
    pub fn with_server(server: SocketAddr) -> Self {
        DnsServiceDiscovery::new(NameServers::Given(server))
    }

    /// The servers it asks.
    pub fn name_servers(&self) -> &NameServers {
        &self.servers
    }
}

impl ServiceDiscovery for DnsServiceDiscovery {
    fn method(&self) -> &str {
        "dns"
    }

    fn lookup(&self, lookup: Lookup, resolve_timeout: Duration) -> LookupFuture {
        let conf = self.conf.clone();
        Box::pin(async move {
            let deadline = Instant::now() + resolve_timeout;
            let resolver = Resolver { conf, deadline };
            let answer = rt::timeout(resolve_timeout, resolver.resolve(&lookup)).await;
            match answer {
                Some(Ok(targets)) => {
                    tracing::debug!("dns: {lookup} resolved to {targets:?}");
                    Ok(Resolved {
                        service_name: lookup.service_name,
                        targets,
                    })
                }
                Some(Err(e)) => Err(e),
                None => Err(DiscoveryError::Timeout {
                    method: "dns".into(),
                    after: resolve_timeout,
                }),
            }
        })
    }
}

/// One lookup's resolver.
struct Resolver {
    conf: Arc<ResolvConf>,
    deadline: Instant,
}

/// The useful parts of an answer.
struct Answer {
    answers: Vec<Record>,
    additionals: Vec<Record>,
}

fn name_text(name: &Name) -> String {
    name.to_ascii().trim_end_matches('.').to_ascii_lowercase()
}

fn ip_of(record: &Record) -> Option<IpAddr> {
    match &record.data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        RData::AAAA(a) => Some(IpAddr::V6(a.0)),
        _ => None,
    }
}

impl Resolver {
    async fn resolve(&self, lookup: &Lookup) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        if self.conf.servers.is_empty() {
            return Err(DiscoveryError::NoNameServer);
        }
        match lookup.srv_name() {
            Some(srv) => self.resolve_srv(&srv).await,
            None => self.resolve_ips(&lookup.service_name).await,
        }
    }

    /// A and AAAA records of the first candidate name that has any.
    async fn resolve_ips(&self, name: &str) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        for candidate in self.conf.candidates(name) {
            let mut ips = Vec::new();
            for kind in [RecordType::A, RecordType::AAAA] {
                if let Some(answer) = self.query(&candidate, kind).await? {
                    ips.extend(answer.answers.iter().filter_map(ip_of));
                }
            }
            if !ips.is_empty() {
                ips.sort();
                ips.dedup();
                return Ok(ips
                    .into_iter()
                    .map(|ip| ResolvedTarget {
                        host: ip.to_string(),
                        port: None,
                        address: Some(ip),
                    })
                    .collect());
            }
        }
        Ok(Vec::new())
    }

    /// SRV records of the first candidate name that has any, with the
    /// addresses of their targets.
    async fn resolve_srv(&self, name: &str) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        for candidate in self.conf.candidates(name) {
            let Some(answer) = self.query(&candidate, RecordType::SRV).await? else {
                continue;
            };
            let mut addresses: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
            for record in answer.additionals.iter().chain(&answer.answers) {
                if let Some(ip) = ip_of(record) {
                    addresses
                        .entry(name_text(&record.name))
                        .or_default()
                        .push(ip);
                }
            }
            let mut srvs: Vec<(u16, String, u16)> = answer
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::SRV(srv) => Some((srv.priority, name_text(&srv.target), srv.port)),
                    _ => None,
                })
                .collect();
            if srvs.is_empty() {
                continue;
            }
            srvs.sort();
            srvs.dedup();
            let mut targets = Vec::new();
            for (_, host, port) in srvs {
                let mut ips = addresses.get(&host).cloned().unwrap_or_default();
                if ips.is_empty() {
                    // Not in the additional records: look the target up.
                    ips = self
                        .resolve_ips(&format!("{host}."))
                        .await?
                        .into_iter()
                        .filter_map(|t| t.address)
                        .collect();
                }
                if ips.is_empty() {
                    tracing::debug!("dns: SRV target {host} of {candidate} has no address");
                    targets.push(ResolvedTarget {
                        host: host.clone(),
                        port: Some(port),
                        address: None,
                    });
                }
                ips.sort();
                ips.dedup();
                targets.extend(ips.into_iter().map(|ip| ResolvedTarget {
                    host: host.clone(),
                    port: Some(port),
                    address: Some(ip),
                }));
            }
            return Ok(targets);
        }
        Ok(Vec::new())
    }

    /// Asks the servers in turn for `name`'s records of `kind`: `None`
    /// for "no such name", else the answer; an error once every server
    /// failed.
    async fn query(&self, name: &str, kind: RecordType) -> Result<Option<Answer>, DiscoveryError> {
        let qname = Name::from_ascii(format!("{name}.")).map_err(|e| DiscoveryError::BadName {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        let mut last_error = DiscoveryError::NoNameServer;
        for server in &self.conf.servers {
            for _ in 0..ATTEMPTS {
                let left = self.deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(last_error);
                }
                let attempt =
                    rt::timeout(ATTEMPT_TIMEOUT.min(left), exchange(*server, &qname, kind)).await;
                let reply = match attempt {
                    None => {
                        last_error = DiscoveryError::Io {
                            server: server.to_string(),
                            reason: format!("no answer for {name} {kind}"),
                        };
                        continue;
                    }
                    Some(Err(e)) => {
                        last_error = e;
                        continue;
                    }
                    Some(Ok(reply)) => reply,
                };
                match reply.metadata.response_code {
                    ResponseCode::NoError => {
                        return Ok(Some(Answer {
                            answers: reply.answers,
                            additionals: reply.additionals,
                        }))
                    }
                    ResponseCode::NXDomain => return Ok(None),
                    code => {
                        last_error = DiscoveryError::DnsServer {
                            server: server.to_string(),
                            name: name.to_string(),
                            code: code.to_string(),
                        };
                        // The next server may know better.
                        break;
                    }
                }
            }
        }
        Err(last_error)
    }
}

/// One query to one server: over UDP, and again over TCP if the answer
/// was truncated.
async fn exchange(
    server: SocketAddr,
    name: &Name,
    kind: RecordType,
) -> Result<Message, DiscoveryError> {
    let io = |reason: String| DiscoveryError::Io {
        server: server.to_string(),
        reason,
    };
    let id = fastrand::u16(..);
    let mut query = Message::new(id, MessageType::Query, OpCode::Query);
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(name.clone(), kind));
    let mut edns = Edns::new();
    edns.set_max_payload(UDP_PAYLOAD);
    query.set_edns(edns);
    let bytes = query
        .to_vec()
        .map_err(|e| io(format!("cannot encode the query: {e}")))?;
    let local = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = rt::UdpSocket::bind(local)
        .await
        .map_err(|e| io(format!("cannot open a UDP socket: {e}")))?;
    socket
        .connect(server)
        .await
        .map_err(|e| io(e.to_string()))?;
    socket.send(&bytes).await.map_err(|e| io(e.to_string()))?;
    let mut buf = vec![0u8; usize::from(UDP_PAYLOAD)];
    let reply = loop {
        let n = socket.recv(&mut buf).await.map_err(|e| io(e.to_string()))?;
        match Message::from_vec(&buf[..n]) {
            Ok(m) if m.metadata.id == id && m.metadata.message_type == MessageType::Response => {
                break m
            }
            Ok(_) => tracing::debug!("dns: {server} sent an answer to another query; dropped"),
            Err(e) => {
                tracing::debug!("dns: {server} sent {n} bytes that are not DNS ({e}); dropped")
            }
        }
    };
    if !reply.metadata.truncation {
        return Ok(reply);
    }
    tracing::debug!("dns: the answer of {server} for {name} {kind} is truncated; asking over TCP");
    let mut stream = rt::TcpStream::connect(server)
        .await
        .map_err(|e| io(format!("TCP: {e}")))?;
    let len = u16::try_from(bytes.len()).map_err(|_| io("the query is too long".into()))?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    stream
        .write_all(&framed)
        .await
        .map_err(|e| io(format!("TCP: {e}")))?;
    let mut len = [0u8; 2];
    stream
        .read_exact(&mut len)
        .await
        .map_err(|e| io(format!("TCP: {e}")))?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| io(format!("TCP: {e}")))?;
    match Message::from_vec(&body) {
        Ok(m) if m.metadata.id == id => Ok(m),
        Ok(_) => Err(io("TCP: an answer to another query".into())),
        Err(e) => Err(io(format!("TCP: not a DNS answer ({e})"))),
    }
}
