//! Asks sent to remote actors that wait for their reply.

use crate::error::AskError;
use crate::remote::address::Address;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Completes an ask with the encoded reply or an error.
pub(crate) type Completion = Box<dyn FnOnce(Result<&[u8], AskError>) + Send>;

struct Pending {
    peer: Address,
    /// After this the asker has given up; the entry is swept.
    expires: Instant,
    complete: Completion,
}

/// The asks of one system that wait for a remote reply.
#[derive(Default)]
pub(crate) struct PendingAsks {
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
}

impl PendingAsks {
    pub(crate) fn register(&self, peer: Address, timeout: Duration, complete: Completion) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let expires = Instant::now() + timeout;
        self.lock().insert(
            id,
            Pending {
                peer,
                expires,
                complete,
            },
        );
        id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn cancel(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Takes the completion of an ask that was not sent after all.
    pub(crate) fn take(&self, id: u64) -> Option<Completion> {
        self.lock().remove(&id).map(|p| p.complete)
    }

    /// Hands a reply to its ask; false if nobody waits for it any more.
    pub(crate) fn complete(&self, id: u64, result: Result<&[u8], AskError>) -> bool {
        let entry = self.lock().remove(&id);
        match entry {
            Some(p) => {
                (p.complete)(result);
                true
            }
            None => false,
        }
    }

    /// Fails every ask waiting on `peer`.
    pub(crate) fn fail_peer(&self, peer: &Address, why: &str) {
        let failed: Vec<Pending> = {
            let mut map = self.lock();
            let ids: Vec<u64> = map
                .iter()
                .filter(|(_, p)| &p.peer == peer)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| map.remove(&id)).collect()
        };
        for p in failed {
            (p.complete)(Err(AskError::Remote(why.to_string())));
        }
    }

    /// Forgets asks whose askers have timed out.
    pub(crate) fn sweep(&self, now: Instant) {
        self.lock().retain(|_, p| p.expires > now);
    }

    /// Fails every ask (at shutdown).
    pub(crate) fn fail_all(&self, why: &str) {
        let all: Vec<Pending> = self.lock().drain().map(|(_, p)| p).collect();
        for p in all {
            (p.complete)(Err(AskError::Remote(why.to_string())));
        }
    }
}
