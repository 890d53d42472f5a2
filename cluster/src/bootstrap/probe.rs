//! Probing one contact point: `GET /bootstrap/seed-nodes` with a hyper 1
//! client over the runtime's TCP, on a connection kept between probes.

use crate::discovery::ResolvedTarget;
use crate::management::SeedNodes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::HOST;
use hyper::{Request, StatusCode};
use smol_hyper::rt::FuturesIo;
use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use troupe_core::remote::Address;
use troupe_core::rt;

/// The path of the contact point.
pub(crate) const SEED_NODES_PATH: &str = "/bootstrap/seed-nodes";
/// The largest answer accepted.
const MAX_ANSWER: usize = 64 * 1024;

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// No connection.
    Connect(String),
    /// The HTTP exchange failed.
    Http(String),
    /// An answer other than 200.
    Status(u16, String),
    /// A 200 whose body is not the contact point's JSON.
    BadAnswer(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Connect(e) => write!(f, "cannot connect: {e}"),
            ProbeError::Http(e) => write!(f, "HTTP failed: {e}"),
            ProbeError::Status(s, body) => write!(f, "answered {s}: {body}"),
            ProbeError::BadAnswer(e) => write!(f, "answered something that is not seed nodes: {e}"),
        }
    }
}

/// A contact point's answer, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeAnswer {
    pub(crate) self_node: Address,
    pub(crate) seed_nodes: BTreeSet<Address>,
}

/// A client of one contact point.
pub(crate) struct Prober {
    target: ResolvedTarget,
    port: u16,
    authority: String,
    connection: Option<SendRequest<Empty<Bytes>>>,
}

impl Prober {
    pub(crate) fn new(target: ResolvedTarget, port: u16) -> Prober {
        let authority = match target.port {
            Some(_) => target.to_string(),
            None => ResolvedTarget::new(target.host.clone(), Some(port)).to_string(),
        };
        Prober {
            target,
            port,
            authority,
            connection: None,
        }
    }

    /// `HOST:PORT` of the contact point.
    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>, ProbeError> {
        let addrs = match self.target.address {
            Some(ip) => vec![SocketAddr::new(ip, self.port)],
            None => rt::resolve(&self.target.host, self.port)
                .await
                .map_err(|e| ProbeError::Connect(format!("cannot resolve the host: {e}")))?,
        };
        let stream = connect_first(addrs).await.map_err(|e| {
            ProbeError::Connect(
                e.unwrap_or_else(|| format!("the host `{}` has no address", self.target.host)),
            )
        })?;
        let (sender, connection) = http1::handshake(FuturesIo::new(stream))
            .await
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        // Drives the connection; ends when the sender is dropped or the
        // server closes it.
        rt::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("bootstrap: contact point connection ended: {e}");
            }
        });
        Ok(sender)
    }

    /// One probe.
    pub(crate) async fn probe(&mut self) -> Result<ProbeAnswer, ProbeError> {
        let result = self.exchange().await;
        if result.is_err() {
            self.connection = None;
        }
        result
    }

    async fn exchange(&mut self) -> Result<ProbeAnswer, ProbeError> {
        let reusable = self.connection.as_mut().is_some_and(|c| !c.is_closed());
        if !reusable {
            self.connection = Some(self.connect().await?);
        }
        let Some(sender) = self.connection.as_mut() else {
            return Err(ProbeError::Connect("no connection".into()));
        };
        sender
            .ready()
            .await
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        let request = Request::get(SEED_NODES_PATH)
            .header(HOST, self.authority.as_str())
            .body(Empty::<Bytes>::new())
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ProbeError::Http(e.to_string()))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| ProbeError::Http(e.to_string()))?
            .to_bytes();
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&body);
            return Err(ProbeError::Status(
                status.as_u16(),
                text.chars().take(200).collect(),
            ));
        }
        parse(&body)
    }
}

/// Parses a contact point's JSON; seed nodes that are not addresses are
/// logged and skipped, a `selfNode` that is not one fails the probe.
pub(crate) fn parse(body: &[u8]) -> Result<ProbeAnswer, ProbeError> {
    let answer: SeedNodes =
        serde_json::from_slice(body).map_err(|e| ProbeError::BadAnswer(e.to_string()))?;
    let self_node = answer
        .self_node
        .parse::<Address>()
        .map_err(|e| ProbeError::BadAnswer(format!("selfNode: {e}")))?;
    let mut seed_nodes = BTreeSet::new();
    for seed in answer.seed_nodes {
        match seed.node.parse::<Address>() {
            Ok(a) => {
                seed_nodes.insert(a);
            }
            Err(e) => tracing::warn!(
                "bootstrap: contact point of {self_node} reported a seed node that is not an address \
                 ({e}); ignored"
            ),
        }
    }
    Ok(ProbeAnswer {
        self_node,
        seed_nodes,
    })
}

/// A connection to the first of `addrs` that accepts one, as a connect to a
/// host name tries each of its addresses in turn; else the last error
/// (`None` when there was no address to try).
async fn connect_first(addrs: Vec<SocketAddr>) -> Result<rt::TcpStream, Option<String>> {
    let mut last = None;
    for addr in addrs {
        match rt::TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_bad_ones_are_refused() {
        let a = parse(
            br#"{"selfNode":"troupe://s@h:1","seedNodes":[
                {"node":"troupe://s@h:2","nodeUid":"1","status":"Up","roles":[]},
                {"node":"garbage","nodeUid":"2","status":"Up","roles":[]}]}"#,
        )
        .unwrap();
        assert_eq!(a.self_node, Address::new("s", "h", 1));
        assert_eq!(
            a.seed_nodes.into_iter().collect::<Vec<_>>(),
            vec![Address::new("s", "h", 2)]
        );
        assert!(matches!(parse(b"{}"), Err(ProbeError::BadAnswer(_))));
        assert!(matches!(
            parse(br#"{"selfNode":"nope","seedNodes":[]}"#),
            Err(ProbeError::BadAnswer(_))
        ));
        assert!(matches!(parse(b"\xff\x00"), Err(ProbeError::BadAnswer(_))));
    }
}
