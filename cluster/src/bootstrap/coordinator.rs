//! The bootstrap coordinator (Akka's `BootstrapCoordinator`): looks the
//! service up again and again (with exponential backoff on failures),
//! keeps one prober task per discovered contact point, and asks the
//! decider every probe interval (and at once when a contact point reports
//! seed nodes) until it joins.
//!
//! Better than Akka for the time to one cluster: the decider also runs at
//! the very moment the discovered set becomes stable, and a node that is
//! not the lowest probes the lowest node's contact point every
//! [`URGENT_PROBE_INTERVAL`] from then on, since that node is forming the
//! cluster now; Akka finds it at the next regular probe, up to 1.2 s
//! later.

use super::decider::{
    decide, JoinDecision, KeepProbing, SeedNodesInformation, SeedNodesObservation,
};
use super::probe::Prober;
use super::settings::BootstrapSettings;
use super::BootstrapStatus;
use crate::cluster::Cluster;
use crate::coordinated_shutdown::Reason;
use crate::discovery::{DiscoveryError, Lookup, Resolved, ResolvedTarget, ServiceDiscovery};
use futures_lite::FutureExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troupe_core::remote::Address;
use troupe_core::rt;

/// How often a node probes the contact point of the node expected to form
/// the new cluster, once the decider has said which one it is.
pub(crate) const URGENT_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// At most this many urgent probes (3 s of them), then back to the
/// regular interval: the lowest node may never form a cluster (its
/// `new-cluster-enabled` is off) and must not be probed often for ever.
const URGENT_PROBES: u32 = 30;

/// The coordinator's handle on one prober task, which stops when the
/// handle is dropped.
struct ProberHandle {
    /// A message makes the prober probe at once and then every
    /// [`URGENT_PROBE_INTERVAL`]; closing it (dropping the handle) stops
    /// the prober.
    nudge: async_channel::Sender<()>,
    /// Whether the prober was made urgent (once is enough).
    urgent: bool,
}

/// What the coordinator hears about.
enum Event {
    Resolved(Result<Resolved, DiscoveryError>),
    Observed(SeedNodesObservation),
    ProbingFailed(ResolvedTarget),
}

pub(crate) struct Coordinator {
    pub(crate) cluster: Cluster,
    pub(crate) discovery: Arc<dyn ServiceDiscovery>,
    pub(crate) settings: BootstrapSettings,
    pub(crate) lookup: Lookup,
    pub(crate) fallback_port: u16,
    pub(crate) status: Arc<Mutex<BootstrapStatus>>,
}

/// The interval before the next lookup after `failures` failures in a
/// row (Akka's backoff: `min(max, interval * 2^failures)`, times a random
/// 1..1+factor).
pub(crate) fn backoff(settings: &BootstrapSettings, failures: u32) -> Duration {
    let base = settings
        .interval
        .saturating_mul(2u32.saturating_pow(failures.min(20)))
        .min(settings.exponential_backoff_max);
    base.mul_f64(1.0 + fastrand::f64() * settings.exponential_backoff_random_factor)
}

/// Keeps Akka's rule for hosts with several ports: without a port name,
/// only the fallback port's targets of such a host are probed.
fn select_hosts(
    lookup: &Lookup,
    fallback_port: u16,
    filter: bool,
    targets: Vec<ResolvedTarget>,
) -> (BTreeSet<ResolvedTarget>, Vec<ResolvedTarget>) {
    if lookup.port_name.is_some() || !filter {
        return (targets.into_iter().collect(), Vec::new());
    }
    let mut by_host: BTreeMap<String, Vec<ResolvedTarget>> = BTreeMap::new();
    for t in targets {
        by_host.entry(t.host.clone()).or_default().push(t);
    }
    let mut selected = BTreeSet::new();
    let mut dropped = Vec::new();
    for group in by_host.into_values() {
        if group.len() > 1 && group.iter().any(|t| t.port.is_some()) {
            let (keep, drop): (Vec<_>, Vec<_>) = group
                .into_iter()
                .partition(|t| t.port == Some(fallback_port));
            selected.extend(keep);
            dropped.extend(drop);
        } else {
            selected.extend(group);
        }
    }
    (selected, dropped)
}

impl Coordinator {
    fn set_status(&self, status: BootstrapStatus) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }

    pub(crate) async fn run(self, stop: async_channel::Receiver<()>) {
        let s = &self.settings;
        let me = self.cluster.self_address().clone();
        tracing::info!(
            "bootstrap: locating the members of service [{}] with discovery method {}; \
             a new cluster forms from at least {} contact points stable for {:?}{}",
            self.lookup,
            self.discovery.method(),
            s.required_contact_point_nr,
            s.stable_margin,
            if s.new_cluster_enabled {
                ""
            } else {
                " (new-cluster-enabled is off: only an existing cluster is joined)"
            }
        );
        let started = Instant::now();
        let (events, inbox) = async_channel::unbounded::<Event>();
        let mut probers: BTreeMap<ResolvedTarget, ProberHandle> = BTreeMap::new();
        let mut contacts: Option<(Instant, BTreeSet<ResolvedTarget>)> = None;
        let mut observations: BTreeMap<ResolvedTarget, SeedNodesObservation> = BTreeMap::new();
        let mut failures = 0u32;
        let mut lookup_in_flight = false;
        let mut next_lookup = Instant::now();
        let mut next_decide = Instant::now() + s.contact_point.probe_interval;
        let mut last_reason = String::new();
        let give_up_at = self
            .cluster
            .shutdown_after_unsuccessful_join()
            .map(|limit| (limit, started + limit));
        let outcome = loop {
            if self.cluster.explicit_join_requested() {
                tracing::info!(
                    "bootstrap: this node was asked to join explicitly; the explicit join wins \
                     and bootstrap stops"
                );
                break BootstrapStatus::ExplicitJoin;
            }
            if self.cluster.is_terminated() {
                break BootstrapStatus::Stopped;
            }
            let now = Instant::now();
            if let Some((limit, at)) = give_up_at {
                if now >= at {
                    tracing::error!(
                        "bootstrap: no cluster to join and none formed within {limit:?} \
                         (shutdown-after-unsuccessful-join-seed-nodes): shutting down{}",
                        if last_reason.is_empty() {
                            String::new()
                        } else {
                            format!("; last: {last_reason}")
                        }
                    );
                    self.cluster
                        .coordinated_shutdown()
                        .start(Reason::ClusterJoinUnsuccessful);
                    break BootstrapStatus::GaveUp;
                }
            }
            if !lookup_in_flight && now >= next_lookup {
                lookup_in_flight = true;
                let lookup = self
                    .discovery
                    .lookup(self.lookup.clone(), s.resolve_timeout);
                let events = events.clone();
                rt::spawn(async move {
                    let _ = events.send(Event::Resolved(lookup.await)).await;
                });
            }
            let mut decide_now = now >= next_decide;
            if !decide_now {
                let mut wake = next_decide;
                if !lookup_in_flight {
                    wake = wake.min(next_lookup);
                }
                if let Some((_, at)) = give_up_at {
                    wake = wake.min(at);
                }
                let wait = wake.saturating_duration_since(now);
                let next = async { inbox.recv().await.ok() }
                    .or(async {
                        // Stopped: every sender gone, or a message.
                        let _ = stop.recv().await;
                        None
                    })
                    .or(async {
                        rt::sleep(wait).await;
                        None
                    });
                let event = next.await;
                if stop.is_closed() || !stop.is_empty() {
                    break BootstrapStatus::Stopped;
                }
                match event {
                    None => {}
                    Some(Event::Resolved(Ok(resolved))) => {
                        lookup_in_flight = false;
                        failures = 0;
                        next_lookup = Instant::now() + backoff(s, 0);
                        let (found, dropped) = select_hosts(
                            &self.lookup,
                            self.fallback_port,
                            s.contact_point.filter_on_fallback_port,
                            resolved.targets,
                        );
                        let changed = contacts.as_ref().is_none_or(|(_, c)| *c != found);
                        if changed {
                            tracing::info!(
                                "bootstrap: located contact points of [{}]: [{}]",
                                self.lookup,
                                found
                                    .iter()
                                    .map(ToString::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            );
                            if !dropped.is_empty() {
                                tracing::info!(
                                    "bootstrap: discovery gave several ports for one host; only \
                                     the fallback port {} is probed, not {}. Set \
                                     bootstrap.contact-point.filter-on-fallback-port = false (or \
                                     a port-name) if those are management endpoints too",
                                    self.fallback_port,
                                    dropped
                                        .iter()
                                        .map(ToString::to_string)
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                );
                            }
                            let changed_at = Instant::now();
                            contacts = Some((changed_at, found.clone()));
                            // Decide as soon as the set can be stable, not
                            // up to a probe interval later.
                            next_decide = next_decide.min(changed_at + s.stable_margin);
                        }
                        observations.retain(|cp, _| found.contains(cp));
                        probers.retain(|cp, _| found.contains(cp));
                        for cp in found {
                            if let std::collections::btree_map::Entry::Vacant(slot) =
                                probers.entry(cp.clone())
                            {
                                if let Some(prober) = self.spawn_prober(cp, events.clone(), &me) {
                                    slot.insert(prober);
                                }
                            }
                        }
                    }
                    Some(Event::Resolved(Err(e))) => {
                        lookup_in_flight = false;
                        failures += 1;
                        let wait = backoff(s, failures);
                        tracing::warn!(
                            "bootstrap: looking up [{}] failed ({e}); next try in {wait:?}",
                            self.lookup
                        );
                        // No decision on an old view.
                        contacts = None;
                        next_lookup = Instant::now() + wait;
                    }
                    Some(Event::Observed(o))
                        if contacts
                            .as_ref()
                            .is_some_and(|(_, c)| c.contains(&o.contact_point)) =>
                    {
                        tracing::debug!(
                            "bootstrap: contact point {} ({}) reports seed nodes {:?}",
                            o.contact_point,
                            o.source_node,
                            o.seed_nodes
                        );
                        decide_now = !o.seed_nodes.is_empty();
                        observations.insert(o.contact_point.clone(), o);
                    }
                    // From a contact point no longer discovered.
                    Some(Event::Observed(_)) => {}
                    Some(Event::ProbingFailed(cp)) => {
                        observations.remove(&cp);
                        probers.remove(&cp);
                        // Look again soon: if it is still discovered, it
                        // is probed again.
                        next_lookup = next_lookup.min(Instant::now() + backoff(s, 0));
                    }
                }
            }
            // An explicit join that came while this loop waited wins over
            // what the decider would do (the loop's top ends bootstrap).
            if !decide_now || self.cluster.explicit_join_requested() {
                continue;
            }
            let now = Instant::now();
            next_decide = now + s.contact_point.probe_interval;
            let Some((changed_at, points)) = &contacts else {
                continue;
            };
            // Decide again the moment the set becomes stable, not up to a
            // probe interval later.
            let stable_at = *changed_at + s.stable_margin;
            if stable_at > now {
                next_decide = next_decide.min(stable_at);
            }
            let fresh = |o: &&SeedNodesObservation| {
                now.saturating_duration_since(o.observed_at)
                    <= s.contact_point.probing_failure_timeout
            };
            let info = SeedNodesInformation {
                now,
                contact_points_changed_at: *changed_at,
                contact_points: points.clone(),
                observations: observations.values().filter(fresh).cloned().collect(),
            };
            match decide(&info, s, &me) {
                JoinDecision::KeepProbing(why) => {
                    if let KeepProbing::NotLowest { lowest } = &why {
                        // That node is forming the cluster now: look for
                        // it often rather than at the next regular probe.
                        let founder = info
                            .observations
                            .iter()
                            .find(|o| o.source_node == *lowest)
                            .and_then(|o| probers.get_mut(&o.contact_point));
                        if let Some(prober) = founder.filter(|p| !p.urgent) {
                            prober.urgent = true;
                            let _ = prober.nudge.try_send(());
                        }
                    }
                    let text = why.to_string();
                    if text != last_reason {
                        tracing::info!("bootstrap: keep probing: {text}");
                        last_reason = text;
                    }
                }
                JoinDecision::JoinSeedNodes(seeds) => {
                    let seeds: Vec<Address> = seeds.into_iter().filter(|a| *a != me).collect();
                    if seeds.is_empty() {
                        continue;
                    }
                    tracing::info!(
                        "bootstrap: joining {me} to the existing cluster of seed nodes {}",
                        seeds
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    self.cluster.bootstrap_join(seeds.clone());
                    break BootstrapStatus::JoinedSeedNodes(seeds);
                }
                JoinDecision::JoinSelf => {
                    tracing::info!(
                        "bootstrap: forming a new cluster: {me} joins itself, as it has the lowest \
                         address of the contact points [{}]; the others will find it by probing",
                        info.observations
                            .iter()
                            .map(|o| format!("{} ({})", o.contact_point, o.source_node))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    self.cluster.bootstrap_join(vec![me.clone()]);
                    break BootstrapStatus::JoinedSelf;
                }
            }
        };
        // Stops every prober.
        drop(probers);
        tracing::debug!("bootstrap: done: {outcome:?}");
        self.set_status(outcome);
    }

    /// Starts probing `contact_point`; `None` if it is this node's own
    /// remoting address (a configuration mistake, logged).
    fn spawn_prober(
        &self,
        contact_point: ResolvedTarget,
        events: async_channel::Sender<Event>,
        me: &Address,
    ) -> Option<ProberHandle> {
        let port = contact_point.port.unwrap_or(self.fallback_port);
        let settings = self.settings.contact_point.clone();
        let mut prober = Prober::new(contact_point.clone(), port);
        if contact_point.host == me.host() && port == me.port() {
            tracing::warn!(
                "bootstrap: contact point {} is this node's remoting address {me}, not a management \
                 endpoint; not probing it (check the discovery and port settings)",
                prober.authority()
            );
            return None;
        }
        let (nudge, nudged) = async_channel::bounded(1);
        let handle = ProberHandle {
            nudge,
            urgent: false,
        };
        tracing::debug!(
            "bootstrap: probing contact point http://{}",
            prober.authority()
        );
        rt::spawn(async move {
            let mut failing_since: Option<Instant> = None;
            let mut urgent = false;
            let mut urgent_probes = 0;
            loop {
                if nudged.is_closed() || events.is_closed() {
                    break;
                }
                let outcome = rt::timeout(settings.probing_failure_timeout, prober.probe()).await;
                if nudged.is_closed() {
                    break;
                }
                let failure = match outcome {
                    Some(Ok(answer)) => {
                        failing_since = None;
                        let observation = SeedNodesObservation {
                            observed_at: Instant::now(),
                            contact_point: contact_point.clone(),
                            source_node: answer.self_node,
                            seed_nodes: answer.seed_nodes,
                        };
                        if events.send(Event::Observed(observation)).await.is_err() {
                            break;
                        }
                        None
                    }
                    Some(Err(e)) => Some(e.to_string()),
                    None => Some(format!(
                        "no answer within {:?}",
                        settings.probing_failure_timeout
                    )),
                };
                if let Some(why) = failure {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    tracing::debug!(
                        "bootstrap: probing http://{} failed: {why}",
                        prober.authority()
                    );
                    if since.elapsed() >= settings.probing_failure_timeout {
                        tracing::warn!(
                            "bootstrap: contact point http://{} has failed for {:?} (last: {why}); \
                             dropping it until discovery finds it again",
                            prober.authority(),
                            settings.probing_failure_timeout
                        );
                        let _ = events
                            .send(Event::ProbingFailed(contact_point.clone()))
                            .await;
                        break;
                    }
                }
                let wait = if urgent && urgent_probes < URGENT_PROBES {
                    urgent_probes += 1;
                    URGENT_PROBE_INTERVAL
                } else {
                    let jitter = settings
                        .probe_interval
                        .mul_f64(settings.probe_interval_jitter * fastrand::f64());
                    settings.probe_interval + jitter
                };
                let nudged_now = async {
                    rt::sleep(wait).await;
                    false
                }
                .or(async { nudged.recv().await.is_ok() })
                .await;
                urgent |= nudged_now;
            }
        });
        Some(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_maximum_with_jitter() {
        let s = BootstrapSettings::default();
        for _ in 0..50 {
            let d0 = backoff(&s, 0);
            assert!(d0 >= Duration::from_secs(1) && d0 <= Duration::from_millis(1200));
            let d2 = backoff(&s, 2);
            assert!(d2 >= Duration::from_secs(4) && d2 <= Duration::from_millis(4800));
            let d9 = backoff(&s, 9);
            assert!(d9 >= Duration::from_secs(15) && d9 <= Duration::from_secs(18));
        }
    }

    #[test]
    fn hosts_with_several_ports_keep_the_fallback_port() {
        let l = Lookup::new("x");
        let t = |h: &str, p: Option<u16>| ResolvedTarget::new(h, p);
        let (found, dropped) = select_hosts(
            &l,
            8558,
            true,
            vec![
                t("a", Some(2552)),
                t("a", Some(8558)),
                t("b", None),
                t("c", Some(9000)),
            ],
        );
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            vec![t("a", Some(8558)), t("b", None), t("c", Some(9000))]
        );
        assert_eq!(dropped, vec![t("a", Some(2552))]);
        let (all, _) = select_hosts(&l, 8558, false, vec![t("a", Some(1)), t("a", Some(2))]);
        assert_eq!(all.len(), 2);
    }
}
