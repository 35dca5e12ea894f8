//! Per-member hooks a manager runs at fixed points of a member's life, so that a user adds
//! setup and cleanup to a shipped manager without wrapping it. A wrapper has to forward every
//! [`Manager`](crate::Manager) method by hand, and one that forgets `needs_recycle` or
//! `recycle` hands the next user whatever the last one left; a hook cannot lose them, since
//! the manager that runs it keeps its own return path whole (docs/design.md, "Hooks").

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a hook's future resolves to: an error is the member's failure (a failed start after
/// connecting, a replaced member after a return).
pub type HookResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A hook's future, borrowing the member.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = HookResult> + Send + 'a>>;

type Hook<T> = Arc<dyn for<'a> Fn(&'a mut T) -> HookFuture<'a> + Send + Sync>;

/// The hooks of one manager, for members of type `T`. Empty by default; cloning shares them.
///
/// ```
/// use pooler::Hooks;
///
/// // The closure names its argument's type: `&mut` the member.
/// let hooks = Hooks::default()
///     .after_connect(|member: &mut Vec<u8>| Box::pin(async move {
///         member.push(1);
///         Ok(())
///     }))
///     .after_return(|member: &mut Vec<u8>| Box::pin(async move {
///         member.clear();
///         Ok(())
///     }));
/// assert!(hooks.has_after_return());
/// ```
pub struct Hooks<T> {
    after_connect: Option<Hook<T>>,
    after_return: Option<Hook<T>>,
}

impl<T> Default for Hooks<T> {
    fn default() -> Self {
        Hooks {
            after_connect: None,
            after_return: None,
        }
    }
}

impl<T> Clone for Hooks<T> {
    fn clone(&self) -> Self {
        Hooks {
            after_connect: self.after_connect.clone(),
            after_return: self.after_return.clone(),
        }
    }
}

impl<T> fmt::Debug for Hooks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("after_connect", &self.after_connect.is_some())
            .field("after_return", &self.after_return.is_some())
            .finish()
    }
}

impl<T> Hooks<T> {
    /// Runs `hook` on every new member, after the manager has set it up and before anyone
    /// takes it (deadpool's `post_create`, sqlx's `after_connect`): session settings, a
    /// login, registering types. An error fails the start (retried with backoff).
    #[must_use]
    pub fn after_connect<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut T) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.after_connect = Some(Arc::new(hook));
        self
    }

    /// Runs `hook` on every member given back in good order, after the manager has made it
    /// clean and before anyone else can take it. It runs in the pool's recycle task, off the
    /// returning user's path, but it makes every return a recycle: a return that would cost
    /// nothing costs the hook. An error replaces the member.
    #[must_use]
    pub fn after_return<F>(mut self, hook: F) -> Self
    where
        F: for<'a> Fn(&'a mut T) -> HookFuture<'a> + Send + Sync + 'static,
    {
        self.after_return = Some(Arc::new(hook));
        self
    }

    /// Whether an `after_connect` hook is set.
    #[must_use]
    pub fn has_after_connect(&self) -> bool {
        self.after_connect.is_some()
    }

    /// Whether an `after_return` hook is set (a manager then recycles every return).
    #[must_use]
    pub fn has_after_return(&self) -> bool {
        self.after_return.is_some()
    }

    /// Runs the `after_connect` hook, if any.
    ///
    /// # Errors
    ///
    /// What the hook returns.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as the hook: dropped, the hook's future is dropped where it stands.
    pub async fn run_after_connect(&self, member: &mut T) -> HookResult {
        match &self.after_connect {
            Some(hook) => hook(member).await,
            None => Ok(()),
        }
    }

    /// Runs the `after_return` hook, if any.
    ///
    /// # Errors
    ///
    /// What the hook returns.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as the hook: dropped, the hook's future is dropped where it stands.
    pub async fn run_after_return(&self, member: &mut T) -> HookResult {
        match &self.after_return {
            Some(hook) => hook(member).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hooks_run_in_turn_and_their_errors_come_back() {
        let hooks: Hooks<Vec<u8>> = Hooks::default()
            .after_connect(|m: &mut Vec<u8>| {
                Box::pin(async move {
                    m.push(1);
                    Ok(())
                })
            })
            .after_return(|m: &mut Vec<u8>| {
                Box::pin(async move { Err(format!("{} left", m.len()).into()) })
            });
        let mut member = Vec::new();
        hooks.run_after_connect(&mut member).await.unwrap();
        assert_eq!(member, [1]);
        let e = hooks.run_after_return(&mut member).await.unwrap_err();
        assert_eq!(e.to_string(), "1 left");
        let none: Hooks<Vec<u8>> = Hooks::default();
        assert!(!none.has_after_return());
        none.run_after_return(&mut member).await.unwrap();
    }
}
