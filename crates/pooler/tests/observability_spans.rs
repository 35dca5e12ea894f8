//! The `pooler.take` span: a test binary of its own, so its thread-scoped subscriber is the
//! only one and no parallel test thread decides tracing's cached callsite interest.

mod common;

use std::time::Duration;

use common::*;
use pooler::PoolConfig;

/// Spans closed while a test ran: name, parent's name, recorded fields.
mod spans {
    use std::fmt;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::{Subscriber, span};
    use tracing_subscriber::layer::{Context, Layer};
    use tracing_subscriber::registry::LookupSpan;

    #[derive(Debug, Clone)]
    pub(crate) struct Closed {
        pub(crate) parent: Option<String>,
        pub(crate) fields: Vec<(String, String)>,
    }

    impl Closed {
        pub(crate) fn field(&self, name: &str) -> Option<&str> {
            self.fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    #[derive(Default, Clone)]
    pub(crate) struct Spans(Arc<Mutex<Vec<(String, Closed)>>>);

    impl Spans {
        pub(crate) fn closed(&self, name: &str) -> Vec<Closed> {
            let all = self.0.lock().unwrap();
            all.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, c)| c.clone())
                .collect()
        }
    }

    struct Fields(Vec<(String, String)>);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.push((field.name().to_owned(), value.to_owned()));
        }
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
        fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
            let mut fields = Fields(Vec::new());
            attrs.record(&mut fields);
            ctx.span(id).unwrap().extensions_mut().insert(fields);
        }

        fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
            let span = ctx.span(id).unwrap();
            let mut ext = span.extensions_mut();
            values.record(ext.get_mut::<Fields>().unwrap());
        }

        fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
            let span = ctx.span(&id).unwrap();
            let closed = Closed {
                parent: span.parent().map(|p| p.name().to_owned()),
                fields: span
                    .extensions()
                    .get::<Fields>()
                    .map(|f| f.0.clone())
                    .unwrap_or_default(),
            };
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_owned(), closed));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_take_runs_in_a_span_under_the_callers_span() {
    use tracing::Instrument;
    use tracing_subscriber::layer::SubscriberExt;

    let spans = spans::Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let (pool, _probe) = pool_with(PoolConfig::new("p", 1, 2), Fake::default()).await;
    async {
        let first = pool.take_member(ms(100)).await.unwrap();
        // Nothing free, room for one more: it starts a member and waits for it.
        let second = pool.take_member(Duration::from_secs(1)).await.unwrap();
        // Nothing free and no room: it queues until its deadline.
        assert!(pool.take_member(ms(50)).await.is_err());
        // A take that never waits, refused.
        assert!(pool.try_take_member().is_err());
        drop((first, second));
    }
    .instrument(tracing::info_span!("request"))
    .await;

    let takes = spans.closed("pooler.take");
    assert_eq!(takes.len(), 4, "{takes:#?}");
    for take in &takes {
        assert_eq!(take.parent.as_deref(), Some("request"), "{take:?}");
        assert_eq!(take.field("pool"), Some("p"));
    }
    assert_eq!(takes[0].field("outcome"), Some("at_once"));
    assert_eq!(takes[0].field("queued"), None);
    assert_eq!(takes[1].field("outcome"), Some("waited"));
    assert_eq!(takes[1].field("grew"), Some("true"));
    assert_eq!(takes[1].field("queued"), Some("true"));
    assert_eq!(takes[2].field("outcome"), Some("timeout"));
    assert_eq!(takes[2].field("queued"), Some("true"));
    assert_eq!(takes[2].field("grew"), None);
    assert_eq!(takes[2].field("waited_us"), Some("50000"));
    assert_eq!(takes[3].field("outcome"), Some("at_capacity"));
}
