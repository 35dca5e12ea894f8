//! The prefetch limits (`basic_qos`) a channel was asked for, and how a return puts them
//! back to the channel's set-up.
//!
//! RabbitMQ keeps one limit per consumer and one for the whole channel, and which of them
//! binds follows the order they were set in (3.10: a per-consumer `basic_qos` after a
//! channel-wide one lifts the channel-wide one for new consumers). So a set-up is put back by
//! sending its last call of each scope again, in its order, after a scope the user changed
//! and the set-up never set is put back to none (0).
//!
//! # Invariants
//!
//! 1. `channel_last` says something only while both scopes are set.

/// The last limit asked for in each scope, and which scope was asked last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Prefetch {
    consumer: Option<u16>,
    channel: Option<u16>,
    channel_last: bool,
}

impl Prefetch {
    /// `basic_qos(count, global)` was asked for (or may have been: it counts once issued).
    pub(crate) fn asked(&mut self, count: u16, global: bool) {
        if global {
            self.channel = Some(count);
        } else {
            self.consumer = Some(count);
        }
        self.channel_last = global && self.consumer.is_some();
    }

    /// What `later` asked for, asked after what `self` holds.
    pub(crate) fn then(&mut self, later: Prefetch) {
        for (count, global) in later.calls().into_iter().flatten() {
            self.asked(count, global);
        }
    }

    /// Its last call of each scope, in the order they were made.
    fn calls(self) -> [Option<(u16, bool)>; 2] {
        let consumer = self.consumer.map(|count| (count, false));
        let channel = self.channel.map(|count| (count, true));
        debug_assert!(
            !self.channel_last || (consumer.is_some() && channel.is_some()),
            "invariant 1"
        );
        if self.channel_last {
            [consumer, channel]
        } else {
            [channel, consumer]
        }
    }

    /// The `basic_qos` calls that put a channel the user left with `self` asked back to
    /// `set_up` (to no limit in a scope `set_up` never set). With `confirm`, at least one
    /// call is made, whatever the user asked: a method the broker answers, which confirms the
    /// channel alive.
    pub(crate) fn restore(self, set_up: Prefetch, confirm: bool) -> [Option<(u16, bool)>; 4] {
        let reset = |asked: Option<u16>, kept: Option<u16>, global| {
            (asked.is_some() && kept.is_none()).then_some((0, global))
        };
        let [first, second] = set_up.calls();
        let mut calls = [
            reset(self.channel, set_up.channel, true),
            reset(self.consumer, set_up.consumer, false),
            first,
            second,
        ];
        let touched = self.consumer.is_some() || self.channel.is_some();
        if !touched && !confirm {
            calls = [None; 4];
        } else if calls.iter().all(Option::is_none) {
            calls[0] = Some((0, false));
        }
        calls
    }
}

/// A channel's limits: those asked for since it was last clean, and its set-up's.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    asked: Prefetch,
    set_up: Prefetch,
}

impl Limits {
    pub(crate) fn asked(&mut self, count: u16, global: bool) {
        self.asked.asked(count, global);
    }

    /// The manager's hooks ran: what they asked for is the set-up from now on.
    pub(crate) fn set_up(&mut self) {
        let asked = std::mem::take(&mut self.asked);
        self.set_up.then(asked);
    }

    /// The calls that put the channel back to its set-up ([`Prefetch::restore`]).
    pub(crate) fn restore(&self, confirm: bool) -> [Option<(u16, bool)>; 4] {
        self.asked.restore(self.set_up, confirm)
    }

    /// The channel is back at its set-up.
    pub(crate) fn cleared(&mut self) {
        self.asked = Prefetch::default();
    }
}

#[cfg(test)]
mod tests {
    use super::Prefetch;

    fn asked(calls: &[(u16, bool)]) -> Prefetch {
        let mut prefetch = Prefetch::default();
        for &(count, global) in calls {
            prefetch.asked(count, global);
        }
        prefetch
    }

    fn restore(user: &[(u16, bool)], set_up: &[(u16, bool)], confirm: bool) -> Vec<(u16, bool)> {
        asked(user)
            .restore(asked(set_up), confirm)
            .into_iter()
            .flatten()
            .collect()
    }

    #[test]
    fn a_channel_nobody_set_a_limit_on_is_confirmed_with_no_limit_or_left_alone() {
        assert_eq!(restore(&[], &[], true), [(0, false)]);
        assert_eq!(restore(&[], &[], false), []);
    }

    #[test]
    fn a_users_limit_goes_back_to_none_where_the_set_up_set_none() {
        assert_eq!(restore(&[(50, false)], &[], false), [(0, false)]);
        assert_eq!(restore(&[(50, true)], &[], false), [(0, true)]);
        assert_eq!(
            restore(&[(50, true), (9, false)], &[], true),
            [(0, true), (0, false)]
        );
    }

    #[test]
    fn the_set_up_is_sent_again_in_its_order_after_any_change_and_to_confirm() {
        let set_up = [(3, false), (4, true)];
        assert_eq!(restore(&[], &set_up, true), set_up);
        assert_eq!(restore(&[], &set_up, false), []);
        assert_eq!(restore(&[(50, true)], &set_up, false), set_up);
        let set_up = [(4, true), (3, false)];
        assert_eq!(restore(&[(50, false)], &set_up, false), set_up);
        // Only the set-up's channel-wide limit: the user's per-consumer one goes to none
        // first, then the channel-wide one is set again, last.
        assert_eq!(
            restore(&[(50, false)], &[(3, true)], true),
            [(0, false), (3, true)]
        );
    }

    #[test]
    fn a_later_set_up_overrides_an_earlier_one_scope_by_scope_and_order_follows() {
        let mut set_up = asked(&[(3, true), (5, false)]);
        set_up.then(asked(&[(7, true)]));
        assert_eq!(set_up, asked(&[(5, false), (7, true)]));
        set_up.then(asked(&[(1, false)]));
        assert_eq!(set_up, asked(&[(7, true), (1, false)]));
    }
}
