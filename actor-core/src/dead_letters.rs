//! Dead letters: messages that could not be delivered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A message that could not be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Path of the intended recipient.
    pub recipient: String,
    /// The message's type (its manifest).
    pub message_type: &'static str,
}

/// Counts, logs (rate limited) and publishes dead letters.
pub(crate) struct DeadLetterOffice {
    count: AtomicU64,
    log_limit: u32,
    log_window: Duration,
    log_state: Mutex<LogWindow>,
    subscribers: Mutex<Vec<async_channel::Sender<DeadLetter>>>,
}

struct LogWindow {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

impl DeadLetterOffice {
    pub(crate) fn new(log_limit: u32, log_window: Duration) -> Self {
        DeadLetterOffice {
            count: AtomicU64::new(0),
            log_limit,
            log_window,
            log_state: Mutex::new(LogWindow {
                started: Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub(crate) fn record(&self, recipient: impl FnOnce() -> String, message_type: &'static str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let subscribed = !lock(&self.subscribers).is_empty();
        let log = self.may_log();
        if !subscribed && log.is_none() {
            return;
        }
        let letter = DeadLetter {
            recipient: recipient(),
            message_type,
        };
        if let Some(suppressed) = log {
            if suppressed > 0 {
                tracing::info!(
                    "{suppressed} dead letters were not logged in the last {:?}",
                    self.log_window
                );
            }
            tracing::info!(
                recipient = %letter.recipient,
                message = letter.message_type,
                "dead letter: message of type {} to {} was not delivered (the actor has stopped)",
                letter.message_type,
                letter.recipient
            );
        }
        if subscribed {
            let mut subs = lock(&self.subscribers);
            subs.retain(|s| match s.try_send(letter.clone()) {
                Ok(()) => true,
                Err(async_channel::TrySendError::Full(_)) => true,
                Err(async_channel::TrySendError::Closed(_)) => false,
            });
        }
    }

    /// `Some(number suppressed since the last logged line)` when this dead
    /// letter may be logged.
    fn may_log(&self) -> Option<u64> {
        let mut w = lock(&self.log_state);
        let now = Instant::now();
        if now.duration_since(w.started) >= self.log_window {
            let suppressed = w.suppressed;
            w.started = now;
            w.logged = 1;
            w.suppressed = 0;
            return Some(suppressed);
        }
        if w.logged < self.log_limit {
            w.logged += 1;
            Some(0)
        } else {
            w.suppressed += 1;
            None
        }
    }

    pub(crate) fn subscribe(&self, capacity: usize) -> async_channel::Receiver<DeadLetter> {
        let (tx, rx) = async_channel::bounded(capacity.max(1));
        lock(&self.subscribers).push(tx);
        rx
    }
}

/// Locks a mutex, ignoring poisoning: the runtime's own critical sections
/// never panic, and user panics are caught before they reach them.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
