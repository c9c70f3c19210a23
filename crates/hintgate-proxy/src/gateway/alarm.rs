//! The event loop's one timer: it rings at the earliest deadline the
//! gateway has (a call's, the journal's outcome flush) or before it, never
//! after.
//!
//! A fresh timer each turn costs a system call: tokio's timer wakes its I/O
//! driver (an eventfd write, then one more poll) whenever a timer is set
//! earlier than the one it last slept towards, even from the loop's own
//! thread, and each call moves a deadline. So the alarm stays set, and is
//! set again only when a deadline comes that is earlier than the one it
//! waits for, or once it has rung. A deadline that went away (a call
//! answered) leaves it set: it rings early, the loop finds nothing due and
//! sets it to what is due next. That is one spare turn per deadline that
//! went away first, against a system call for every call.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{Instant, Sleep};

/// The loop's timer (see the module's docs).
pub(crate) struct Alarm {
    sleep: Pin<Box<Sleep>>,
    /// When it rings, if it is set.
    armed: Option<Instant>,
}

impl Alarm {
    /// An alarm that is not set.
    pub(crate) fn new() -> Self {
        Alarm {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    /// Makes the alarm ring at `next` at the latest (`None`: nothing is
    /// due). It keeps an earlier time it is set to.
    pub(crate) fn set(&mut self, next: Option<Instant>) {
        if let Some(at) = reset_to(self.armed, next) {
            self.sleep.as_mut().reset(at);
            self.armed = Some(at);
        }
    }

    /// Completes when the alarm rings; never, if it is not set. Dropped
    /// before it completes, the alarm stays set.
    pub(crate) fn rung(&mut self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.armed.is_none() {
                return std::task::Poll::Pending;
            }
            match self.sleep.as_mut().poll(cx) {
                std::task::Poll::Ready(()) => {
                    self.armed = None;
                    std::task::Poll::Ready(())
                }
                std::task::Poll::Pending => std::task::Poll::Pending,
            }
        })
    }
}

/// When an alarm set for `armed` must be set again for a deadline at
/// `next`: only for a deadline earlier than the one it waits for, or when
/// it waits for none.
fn reset_to(armed: Option<Instant>, next: Option<Instant>) -> Option<Instant> {
    match (armed, next) {
        (_, None) => None,
        (None, Some(next)) => Some(next),
        (Some(armed), Some(next)) => (next < armed).then_some(next),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_alarm_is_set_again_only_for_an_earlier_deadline_or_when_unset() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(50);
        let later = now + Duration::from_secs(60);
        let table = [
            (None, None, None),
            (None, Some(later), Some(later)),
            (Some(later), None, None),
            (Some(later), Some(soon), Some(soon)),
            (Some(soon), Some(later), None),
            (Some(soon), Some(soon), None),
        ];
        for (armed, next, expected) in table {
            assert_eq!(reset_to(armed, next), expected, "{armed:?} then {next:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn it_rings_at_the_earliest_deadline_and_not_again_until_set() {
        let start = Instant::now();
        let mut alarm = Alarm::new();
        alarm.set(Some(start + Duration::from_secs(60)));
        alarm.set(Some(start + Duration::from_secs(5)));
        // A later deadline keeps the earlier one.
        alarm.set(Some(start + Duration::from_secs(30)));
        alarm.rung().await;
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
        // Rung, it waits for nothing until it is set again.
        let idle = tokio::time::timeout(Duration::from_secs(3600), alarm.rung()).await;
        assert!(idle.is_err(), "an alarm that has rung rang again unset");
        alarm.set(Some(Instant::now() + Duration::from_secs(1)));
        let before = Instant::now();
        alarm.rung().await;
        assert_eq!(Instant::now() - before, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_alarm_not_waited_for_to_the_end_stays_set() {
        let start = Instant::now();
        let mut alarm = Alarm::new();
        alarm.set(Some(start + Duration::from_secs(10)));
        let cut = tokio::time::timeout(Duration::from_secs(4), alarm.rung()).await;
        assert!(cut.is_err());
        alarm.rung().await;
        assert_eq!(Instant::now() - start, Duration::from_secs(10));
    }
}
