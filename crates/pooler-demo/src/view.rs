//! What the demo shows while it runs: each pool now and over the last seconds, beside the
//! events that explain the changes. Drawn with ratatui on a terminal, or as plain lines.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::Duration;

use pooler::{Pooler, Utilization};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Sparkline, Wrap};
use tracing::Level;

use crate::events::{Event, EventLog};

/// How many samples (one per tick) each pool's history keeps.
const HISTORY: usize = 240;

/// One sample of a pool.
#[derive(Debug, Clone, Copy)]
struct Sample {
    in_use: u64,
    free: u64,
    queued: u64,
}

/// The pools' histories and the event log, sampled once per tick.
pub(crate) struct View {
    pools: BTreeMap<String, (Utilization, VecDeque<Sample>)>,
    groups: BTreeMap<String, String>,
    events: EventLog,
    printed: u64,
}

/// The run's state for the header.
pub(crate) struct Status {
    pub(crate) elapsed: Duration,
    pub(crate) duration: Duration,
    pub(crate) burst: bool,
    pub(crate) consumers: usize,
}

impl View {
    /// `groups`: each pool's group, for the titles.
    pub(crate) fn new(events: EventLog, groups: BTreeMap<String, String>) -> Self {
        View {
            pools: BTreeMap::new(),
            groups,
            events,
            printed: 0,
        }
    }

    /// Records every pool's counts now.
    pub(crate) fn sample(&mut self, pooler: &Pooler) {
        for (name, u) in pooler.utilization() {
            let entry = self
                .pools
                .entry(name)
                .or_insert_with(|| (u, VecDeque::new()));
            entry.0 = u;
            if entry.1.len() == HISTORY {
                entry.1.pop_front();
            }
            entry.1.push_back(Sample {
                in_use: u.in_use_count as u64,
                free: u.free_count as u64,
                queued: u.queued_count as u64,
            });
        }
    }

    /// Plain output: one line per pool, then the events since the last call.
    /// Counts every event logged so far as shown.
    pub(crate) fn caught_up(&mut self) {
        if let Some(last) = self.events.since(self.printed).last() {
            self.printed = last.seq + 1;
        }
    }

    pub(crate) fn plain(&mut self, status: &Status) -> String {
        let mut out = String::new();
        let t = status.elapsed.as_secs_f64();
        for (name, (u, _)) in &self.pools {
            let _ = writeln!(out, "t={t:>4.0}s {}", pool_line(name, u));
        }
        for event in self.events.since(self.printed) {
            let _ = writeln!(out, "{}", event_line(&event));
            self.printed = event.seq + 1;
        }
        out
    }

    /// The live view: header, pools with their histories on the left, events on the right.
    pub(crate) fn draw(&self, frame: &mut Frame<'_>, status: &Status) {
        let [header, body] =
            Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(frame.area());
        let phase = if status.burst { "burst" } else { "calm" };
        let title = Line::from(vec![
            Span::from(" pooler-demo ").bold().reversed(),
            Span::from(format!(
                "  t={:>5.1}s of {}s   phase: {phase:<5}   consumers: {:<3}   q quits",
                status.elapsed.as_secs_f64(),
                status.duration.as_secs(),
                status.consumers
            )),
        ]);
        let legend = Line::from(vec![
            Span::from("  "),
            Span::styled("█ in use ", Style::new().fg(Color::Yellow)),
            Span::styled("█ free ", Style::new().fg(Color::Green)),
            Span::styled("█ starting ", Style::new().fg(Color::Cyan)),
            Span::styled("█ stopping ", Style::new().fg(Color::Red)),
            Span::from("  histories: one column per 0.1 s, newest on the right"),
        ]);
        frame.render_widget(Paragraph::new(vec![title, legend]), header);

        let [left, right] =
            Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
                .areas(body);
        self.draw_pools(frame, left);
        self.draw_events(frame, right);
    }

    fn draw_pools(&self, frame: &mut Frame<'_>, area: Rect) {
        let block = Block::bordered().title(" pools ");
        let inner = block.inner(area);
        frame.render_widget(block, area);
        let rows = Layout::vertical(self.pools.iter().map(|_| Constraint::Length(5)))
            .spacing(1)
            .split(inner);
        for ((name, (u, history)), row) in self.pools.iter().zip(rows.iter()) {
            self.draw_pool(frame, *row, name, u, history);
        }
    }

    fn draw_pool(
        &self,
        frame: &mut Frame<'_>,
        area: Rect,
        name: &str,
        u: &Utilization,
        history: &VecDeque<Sample>,
    ) {
        let [title, bar, in_use, free, queued] =
            Layout::vertical([Constraint::Length(1); 5]).areas(area);
        let group = self
            .groups
            .get(name)
            .map(|g| format!("  group {g}"))
            .unwrap_or_default();
        frame.render_widget(
            Paragraph::new(Line::from(vec![
                Span::from(name.to_owned()).bold(),
                Span::from(format!(
                    "{group}  in use {} · free {} · starting {} · stopping {} · queued {}/{}{}",
                    u.in_use_count,
                    u.free_count,
                    u.starting_count,
                    u.stopping_count,
                    u.queued_count,
                    u.queue_max,
                    u.admission_limit
                        .map_or_else(String::new, |l| format!(" · admits {l}")),
                )),
            ])),
            title,
        );
        frame.render_widget(Paragraph::new(members_bar(u)), bar);
        let width = usize::from(in_use.width.saturating_sub(8));
        let series = |pick: fn(&Sample) -> u64| -> Vec<u64> {
            let skip = history.len().saturating_sub(width);
            history.iter().skip(skip).map(pick).collect()
        };
        let max = u.max_count as u64;
        for (area, label, data, color, top) in [
            (in_use, "in use", series(|s| s.in_use), Color::Yellow, max),
            (free, "free  ", series(|s| s.free), Color::Green, max),
            (
                queued,
                "queued",
                series(|s| s.queued),
                Color::Magenta,
                (u.queue_max as u64).max(1),
            ),
        ] {
            let [label_area, spark_area] =
                Layout::horizontal([Constraint::Length(8), Constraint::Min(0)]).areas(area);
            frame.render_widget(Paragraph::new(format!(" {label}")), label_area);
            frame.render_widget(
                Sparkline::default()
                    .data(&data)
                    .max(top.max(1))
                    .style(Style::new().fg(color)),
                spark_area,
            );
        }
    }

    fn draw_events(&self, frame: &mut Frame<'_>, area: Rect) {
        let block = Block::bordered().title(" events (what happened, to which pool, why) ");
        let inner = block.inner(area);
        let width = usize::from(inner.width.max(1));
        // The newest events that fit once wrapped, oldest first.
        let mut budget = usize::from(inner.height);
        let mut shown = Vec::new();
        for e in self
            .events
            .last(usize::from(inner.height))
            .into_iter()
            .rev()
        {
            let chars = 7 + 11 + e.text.chars().count();
            let height = chars.div_ceil(width).max(1);
            if height > budget {
                break;
            }
            budget -= height;
            shown.push(e);
        }
        shown.reverse();
        let lines: Vec<Line<'_>> = shown
            .into_iter()
            .map(|e| {
                let color = match e.level {
                    Level::ERROR => Color::Red,
                    Level::WARN => Color::Yellow,
                    Level::INFO => Color::Cyan,
                    _ => Color::Gray,
                };
                Line::from(vec![
                    Span::from(format!("{:>5.1}s ", e.at.as_secs_f64())),
                    Span::from(format!("{:<10} ", e.pool)).bold(),
                    Span::styled(e.text, Style::new().fg(color)),
                ])
            })
            .collect();
        frame.render_widget(
            Paragraph::new(lines).wrap(Wrap { trim: true }).block(block),
            area,
        );
    }
}

/// A pool's members as a bar of `max_count` cells.
fn members_bar(u: &Utilization) -> Line<'static> {
    let cell = |n: usize, color: Color| Span::styled("█".repeat(n), Style::new().fg(color));
    let used = u.in_use_count + u.free_count + u.starting_count + u.stopping_count;
    Line::from(vec![
        Span::from(" ["),
        cell(u.in_use_count, Color::Yellow),
        cell(u.free_count, Color::Green),
        cell(u.starting_count, Color::Cyan),
        cell(u.stopping_count, Color::Red),
        Span::from("·".repeat(u.max_count.saturating_sub(used))),
        Span::from("]"),
    ])
}

/// One pool as a plain line.
pub(crate) fn pool_line(name: &str, u: &Utilization) -> String {
    let bar = |n: usize, c: char| std::iter::repeat_n(c, n).collect::<String>();
    let pool = bar(u.in_use_count, '#')
        + &bar(u.free_count, '=')
        + &bar(u.starting_count, '+')
        + &bar(u.stopping_count, '-');
    let limit = u
        .admission_limit
        .map_or_else(String::new, |l| format!(" limit={l}"));
    format!(
        "{name:<10} [{pool:<max$}] in_use={:<2} free={:<2} starting={:<2} stopping={:<2} queued={:<3}{limit}",
        u.in_use_count,
        u.free_count,
        u.starting_count,
        u.stopping_count,
        u.queued_count,
        max = u.max_count,
    )
}

/// One event as a plain line.
fn event_line(e: &Event) -> String {
    format!(
        "t={:>4.1}s event {:<10} {}: {}",
        e.at.as_secs_f64(),
        e.pool,
        e.level.as_str().to_lowercase(),
        e.text
    )
}
