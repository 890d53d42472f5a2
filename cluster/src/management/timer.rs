//! hyper's timer trait over the runtime's timers (for the header read
//! timeout), so that hyper never names a runtime itself.

use hyper::rt::Sleep;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use troupe_core::rt;

/// [`hyper::rt::Timer`] on [`troupe_core::rt`] timers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RtTimer;

impl hyper::rt::Timer for RtTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(RtSleep(rt::timer_after(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(RtSleep(rt::timer_at(deadline)))
    }
}

struct RtSleep(rt::Timer);

impl Future for RtSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

impl Sleep for RtSleep {}
