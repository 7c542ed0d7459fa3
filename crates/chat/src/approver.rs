//! Confirmations asked in a chat: buttons, who may press them, and the
//! owner's chat for a guest's calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use flynn_channels::outbound::{self, Sent};
use flynn_channels::{Button, ButtonStyle, ChannelAdapter, Target};
use flynn_tools::{ApprovalRequest, Approver, Decision};
use tokio::sync::oneshot;

use crate::{Answerer, ChannelRouter, Waiting};
use flynn_protocol::clock::now_millis;
use flynn_protocol::sync::lock;

/// Largest tool input shown for approval in a chat, in bytes; a longer
/// one is never shown cut short: it is denied, to be done another way.
pub const MAX_APPROVAL_INPUT: usize = 32 * 1024;

/// Asks for confirmations in a chat: the one a turn came from, or the
/// owner's.
pub(crate) struct ChannelApprover {
    pub(crate) router: ChannelRouter,
    pub(crate) adapter: Arc<dyn ChannelAdapter>,
    pub(crate) target: Target,
    pub(crate) channel: String,
    /// Who may press the buttons.
    pub(crate) answerer: Answerer,
    /// Whose turn asks, when it is not the chat's own (a guest's call
    /// asked in the owner's chat).
    pub(crate) asked_for: Option<String>,
}

/// A token nobody can guess, for one confirmation's buttons.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to the clock and a counter, still
        // bound to the chat and the answerer.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        return format!("{:x}{n:x}", now_millis());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tool call as a chat shows it for approval: the whole input in a
/// code block no input can close early.
pub(crate) fn approval_text(request: &ApprovalRequest, asked_for: Option<&str>) -> Option<String> {
    let input = serde_json::to_string_pretty(&request.input).unwrap_or_default();
    if input.len() > MAX_APPROVAL_INPUT {
        return None;
    }
    let mut longest = 0;
    let mut run = 0;
    for c in input.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    let mut text = format!("**Allow `{}`?**", request.tool);
    if let Some(who) = asked_for {
        text.push_str(&format!("\n_Asked in a conversation with {who}._"));
    }
    text.push_str(&format!("\n{fence}json\n{input}\n{fence}"));
    Some(text)
}

#[async_trait]
impl Approver for ChannelApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Decision {
        let inner = &self.router.inner;
        let token = random_token();
        let Some(mut text) = approval_text(request, self.asked_for.as_deref()) else {
            return Decision::Deny {
                reason: format!(
                    "its input is longer than {} KiB, too long to show for approval in a chat",
                    MAX_APPROVAL_INPUT / 1024
                ),
            };
        };
        if let Some(reason) = &request.reason {
            text.push_str(&format!("\n_{reason}_"));
        }
        text.push_str(&format!(
            "\nDenied automatically in {} s.",
            request.timeout.as_secs()
        ));
        let buttons = [
            Button {
                label: "Approve".to_owned(),
                data: format!("y:{token}"),
                style: ButtonStyle::Primary,
            },
            Button {
                label: "Deny".to_owned(),
                data: format!("n:{token}"),
                style: ButtonStyle::Danger,
            },
        ];
        let (tx, rx) = oneshot::channel();
        lock(&inner.confirmations).insert(
            token.clone(),
            Waiting {
                channel: self.channel.clone(),
                answerer: self.answerer.clone(),
                answer: tx,
            },
        );
        let mut guard = Unlist {
            router: self.router.clone(),
            token,
            adapter: self.adapter.clone(),
            target: self.target.clone(),
            text: text.clone(),
            sent: None,
        };
        match outbound::send(self.adapter.as_ref(), &self.target, &text, &buttons).await {
            Ok(sent) => guard.sent = Some(sent),
            Err(e) => {
                return Decision::Deny {
                    reason: format!("could not ask on {}: {e}", self.channel),
                };
            }
        }
        let Ok((decision, who)) = rx.await else {
            return Decision::Deny {
                reason: "the confirmation was withdrawn".to_owned(),
            };
        };
        let verdict = match &decision {
            Decision::Approve => format!("✅ Approved by {who}"),
            Decision::Deny { .. } => format!("❌ Denied by {who}"),
        };
        guard.finish(verdict).await;
        decision
    }
}

/// Asks the owner about a guest's tool call: in the owner's direct chat
/// on the channel when the owner has written there, else through the
/// runtime's owner approver (the dashboard); never the guest.
pub(crate) struct OwnerApprover {
    pub(crate) router: ChannelRouter,
    pub(crate) adapter: Arc<dyn ChannelAdapter>,
    pub(crate) channel: String,
    /// The guest, as the owner is shown it.
    pub(crate) guest: String,
}

#[async_trait]
impl Approver for OwnerApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Decision {
        let inner = &self.router.inner;
        let owner_chat = lock(&inner.owner_chats).get(&self.channel).cloned();
        if let Some(target) = owner_chat {
            let asker = ChannelApprover {
                router: self.router.clone(),
                adapter: self.adapter.clone(),
                target,
                channel: self.channel.clone(),
                answerer: Answerer::Owners,
                asked_for: Some(format!("the guest {} on {}", self.guest, self.channel)),
            };
            return asker.approve(request).await;
        }
        match inner.manager.owner_approver() {
            Some(approver) => approver.approve(request).await,
            None => Decision::Deny {
                reason: format!(
                    "it needs the owner's approval, and the owner could not be asked: name the owner in channels.{}.owners and write to the bot once, or open the dashboard",
                    self.channel
                ),
            },
        }
    }
}

/// Takes a confirmation off the waiting list when its wait ends, and
/// takes the buttons off its message.
pub(crate) struct Unlist {
    pub(crate) router: ChannelRouter,
    pub(crate) token: String,
    pub(crate) adapter: Arc<dyn ChannelAdapter>,
    pub(crate) target: Target,
    pub(crate) text: String,
    pub(crate) sent: Option<Sent>,
}

impl Unlist {
    pub(crate) async fn finish(&mut self, verdict: String) {
        if let Some(mut sent) = self.sent.take() {
            let text = format!("{}\n\n{verdict}", self.text);
            if let Err(e) =
                outbound::show(self.adapter.as_ref(), &self.target, &mut sent, &text, &[]).await
            {
                tracing::debug!(error = %e, "could not update the confirmation");
            }
        }
    }
}

impl Drop for Unlist {
    fn drop(&mut self) {
        lock(&self.router.inner.confirmations).remove(&self.token);
        // Timed out or cancelled: the buttons go, so nobody presses them
        // for nothing.
        if let Some(mut sent) = self.sent.take() {
            let adapter = self.adapter.clone();
            let target = self.target.clone();
            let text = format!("{}\n\n⌛ No longer waiting.", self.text);
            self.router.inner.tasks.spawn(async move {
                let _ = outbound::show(adapter.as_ref(), &target, &mut sent, &text, &[]).await;
            });
        }
    }
}
