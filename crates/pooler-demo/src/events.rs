//! The event pane's source: pooler's own `tracing` events (starts, failed starts and their
//! backoff, deaths, replacements, culls, retirements), kept in a bounded log the views read.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::{Event as TracingEvent, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// How many events the log keeps.
const KEPT: usize = 500;

/// One thing that happened to a pool.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// The event's number since the run began.
    pub(crate) seq: u64,
    /// When, since the run began.
    pub(crate) at: Duration,
    pub(crate) level: Level,
    /// The pool it happened to ("" when the event names none).
    pub(crate) pool: String,
    /// What happened, and why.
    pub(crate) text: String,
}

/// The events seen so far, newest last.
#[derive(Debug, Clone)]
pub(crate) struct EventLog {
    inner: Arc<Mutex<Inner>>,
    start: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    events: VecDeque<Event>,
    next_seq: u64,
    /// How many events of each message, over the whole run.
    counts: BTreeMap<String, u64>,
}

impl EventLog {
    pub(crate) fn new() -> Self {
        EventLog {
            inner: Arc::default(),
            start: Instant::now(),
        }
    }

    fn push(&self, level: Level, pool: String, message: &str, text: String) {
        let at = self.start.elapsed();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *inner.counts.entry(message.to_owned()).or_default() += 1;
        let seq = inner.next_seq;
        inner.next_seq += 1;
        if inner.events.len() == KEPT {
            inner.events.pop_front();
        }
        inner.events.push_back(Event {
            seq,
            at,
            level,
            pool,
            text,
        });
    }

    /// How many events of each message the run saw.
    pub(crate) fn counts(&self) -> BTreeMap<String, u64> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.counts.clone()
    }

    /// The last `n` events, oldest first.
    pub(crate) fn last(&self, n: usize) -> Vec<Event> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = inner.events.len().saturating_sub(n);
        inner.events.iter().skip(skip).cloned().collect()
    }

    /// The events numbered `from` and later that are still kept.
    pub(crate) fn since(&self, from: u64) -> Vec<Event> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .events
            .iter()
            .filter(|e| e.seq >= from)
            .cloned()
            .collect()
    }

    /// A `tracing` layer that records pooler's events into this log.
    pub(crate) fn layer(&self) -> EventLayer {
        EventLayer { log: self.clone() }
    }
}

/// Records events into an [`EventLog`].
pub(crate) struct EventLayer {
    log: EventLog,
}

impl<S: Subscriber> Layer<S> for EventLayer {
    fn on_event(&self, event: &TracingEvent<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.message.clone();
        self.log.push(
            *event.metadata().level(),
            std::mem::take(&mut fields.pool),
            &message,
            fields.text(),
        );
    }
}

/// An event's fields: the pool apart, the message, the rest as `key=value`.
#[derive(Default)]
struct Fields {
    pool: String,
    message: String,
    rest: String,
}

impl Fields {
    fn text(self) -> String {
        if self.rest.is_empty() {
            self.message
        } else {
            format!("{} ({})", self.message, self.rest.trim_start())
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "pool" => self.pool = value.to_owned(),
            "message" => self.message = value.to_owned(),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "pool" => self.pool = format!("{value:?}").trim_matches('"').to_owned(),
            "message" => self.message = format!("{value:?}"),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}
