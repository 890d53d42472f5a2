//! Cluster HTTP management: the routes and JSON shapes of Akka
//! Management's cluster HTTP management, served with hyper 1 over the
//! runtime's sockets.
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET /cluster/members` | this node's view of the membership ([`ClusterMembers`]) |
//! | `GET /cluster/members/{address}` | one member ([`ClusterMember`]), 404 if unknown |
//! | `POST /cluster/members` (form `address`) | joins the cluster of that address |
//! | `PUT /cluster/members/{address}` (form `operation` = `Down` or `Leave`) | downs the member, or asks it to leave |
//! | `DELETE /cluster/members/{address}` | asks the member to leave |
//! | `GET /ready` | 200 when this node is Up or WeaklyUp and every readiness check passes, 503 ([`NotReady`]) otherwise |
//! | `GET /alive` | 200 while the server runs and every liveness check passes, 503 ([`NotReady`]) otherwise |
//! | `GET /startup` | 200 once every startup check passes, 503 ([`NotReady`]) before |
//! | `GET /bootstrap/seed-nodes` | cluster bootstrap's contact point ([`SeedNodes`]), served before the node has joined |
//!
//! Applications extend the server (as Akka Management's route providers
//! and health checks): [`ManagementSettings::with_extra_routes`] adds
//! routes that see the whole request ([`RouteRequest`]: method, path,
//! query, body), tried before the cluster routes, and
//! [`ManagementSettings::with_readiness_check`] adds a named check to
//! `/ready` (cluster sharding offers both in `troupe_sharding::management`).
//!
//! `{address}` is a node's address (`troupe://SYSTEM@HOST:PORT`), URL-encoded
//! or not, or its `SYSTEM@HOST:PORT` part. Errors are JSON
//! `{"message": "..."}` ([`ManagementMessage`]) with a 4xx or 5xx status.
//!
//! The server is read-only by default: `POST`, `PUT` and `DELETE` answer
//! 405 until [`ManagementSettings::read_only`] is set to `false`. Anyone who
//! can reach a mutable server can down or remove members, so bind it to a
//! private interface.
//!
//! ```no_run
//! use troupe_cluster::management::{ManagementServer, ManagementSettings};
//! use troupe_cluster::{Cluster, ClusterSettings};
//! use troupe_core::prelude::*;
//! use troupe_core::remote::RemoteSettings;
//!
//! let system = ActorSystem::builder("shop")
//!     .remote(RemoteSettings::new("127.0.0.1:2552").with_secret("s3cret"))
//!     .build()
//!     .unwrap();
//! let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
//! let server = ManagementServer::start(cluster, ManagementSettings::default()).unwrap();
//! println!("curl http://{}/cluster/members", server.local_addr());
//! ```

mod json;
mod routes;
mod server;
mod settings;
mod timer;

pub(crate) use json::MAX_SEED_NODES;
pub use json::{
    ClusterMember, ClusterMembers, ClusterUnreachableMember, FailedCheck, ManagementMessage,
    NotReady, SeedNodes,
};
pub use server::ManagementServer;
pub use settings::{
    ExtraRoutes, HealthCheck, HealthCheckResult, ManagementError, ManagementSettings, RouteAnswer,
    RouteRequest,
};
