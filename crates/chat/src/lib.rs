//! Chat channels to sessions and back.
//!
//! Every delivery an adapter receives passes, in order: the group filter
//! (`allow_groups`), mention gating in groups (`require_mention`), the
//! sender's rate limit, the access check (`allow_from`, `dm_policy`,
//! senders approved by pairing; an unknown sender in a direct chat gets a
//! pairing code), then becomes a turn of session `<channel>:<peer>`. The
//! message is stored (with the platform's id, so a redelivery is answered
//! once) before the adapter is told to acknowledge it. The answer streams
//! back to the same place by editing one message (or is sent whole where
//! the platform cannot edit), with a typing indicator while the turn runs;
//! a tool call that needs confirmation asks with Approve / Deny buttons.
//!
//! Each message carries its sender as a principal: a sender in the
//! channel's `owners` (or promoted with `flynn pairing approve --owner`)
//! is the owner, everyone else let in is a guest. Only owners answer the
//! owner's confirmations; a guest's go to the owner (the owner's direct
//! chat, else the dashboard) unless `guest_approvals: requester` lets the
//! guest answer its own. Confirmation tokens are random and end with the
//! wait.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use flynn_protocol::config::VoiceReply;
use flynn_voice::{Audio, Synthesizer, Transcriber};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use flynn_channels::outbound::{self, Sent};
use flynn_channels::ratelimit::{RateLimiter, Verdict};
use flynn_channels::{
    Action, Attachment, AttachmentKind, ChannelAdapter, ChannelState, ChatKind, Delivery,
    Disposition, FileKind, InboundEvent, InboundMessage, OutgoingFile, Registry, Target,
};
use flynn_protocol::config::{ChannelAccess, ChannelsConfig, DmPolicy, GuestApprovals};
use flynn_protocol::{
    AgentEvent, ContentBlock, ImageSource, MediaFile, MediaKind, Principal, SessionKey, TurnId,
};
use flynn_sessions::PairingError;
use flynn_sessions::pairing::CODE_TTL_MS;
use flynn_tools::{Approver, Decision};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::approver::{ChannelApprover, OwnerApprover};
use crate::inbox::{megabytes, safe_file_name, save_in_inbox};
use flynn_orchestrator::{
    Command, Error, Followed, RecoveredTurn, Recovery, Result, SessionManager, Submitted,
    TurnEvents, TurnHandle, TurnRequest, Undelivered, VoiceChoice,
};
use flynn_protocol::clock::now_millis;
use flynn_protocol::sync::lock;

mod approver;
mod inbox;

/// Largest file from a chat kept for the model.
pub const MAX_ATTACHMENT_BYTES: usize = 20 * 1024 * 1024;
/// Files of one message downloaded; more are named and left out.
pub const MAX_ATTACHMENTS: usize = 10;
/// Bytes of files one channel downloads at once (by declared size, a
/// file without one counting as [`MAX_ATTACHMENT_BYTES`]); a file that
/// does not fit is left out, saying so.
pub const MAX_BYTES_IN_FLIGHT: u64 = 64 * 1024 * 1024;
/// The longest one file from a chat may take to download.
pub(crate) const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the typing indicator is renewed while a turn runs (platforms
/// show it for about five seconds).
pub(crate) const TYPING_EVERY: Duration = Duration::from_secs(4);
/// Button presses remembered to answer a redelivered press once.
pub(crate) const RECENT_ACTIONS: usize = 1024;
/// Chat commands remembered (by the platform's message id) to run a
/// redelivered one once.
pub(crate) const RECENT_COMMANDS: usize = 1024;
/// How long a recovered answer waits for its channel to come up.
pub(crate) const RECOVERED_WAIT: Duration = Duration::from_secs(60);

/// Routes deliveries from a [`Registry`]'s adapters into sessions and
/// answers back. Cheap to clone.
#[derive(Clone)]
pub struct ChannelRouter {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) manager: SessionManager,
    pub(crate) registry: Registry,
    pub(crate) access: HashMap<String, ChannelAccess>,
    pub(crate) limiters: Mutex<HashMap<String, RateLimiter>>,
    pub(crate) confirmations: Mutex<HashMap<String, Waiting>>,
    /// Where each channel's owner last wrote in a direct chat: a guest's
    /// confirmations are asked there.
    pub(crate) owner_chats: Mutex<HashMap<String, Target>>,
    pub(crate) recent_actions: Mutex<VecDeque<String>>,
    /// Commands handled, by `<session> <message id>`: a redelivered
    /// `/reset` must not wipe what came after it.
    pub(crate) recent_commands: Mutex<VecDeque<String>>,
    /// Deliveries waiting for their chat's earlier ones, by chat: chats
    /// are handled concurrently, each one's deliveries in order.
    pub(crate) lines: Mutex<HashMap<String, VecDeque<Delivery>>>,
    pub(crate) tasks: TaskTracker,
    /// Where files from chats are saved (`<workspace>/inbox/<channel>/`).
    pub(crate) workspace: PathBuf,
    /// Each channel's download budget, in bytes ([`MAX_BYTES_IN_FLIGHT`]).
    pub(crate) in_flight: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Why each channel's deliveries are being refused, and how many were,
    /// since the last one accepted: a store that cannot write refuses
    /// every redelivery, and the reason is logged once, not each time.
    pub(crate) refusing: Mutex<HashMap<String, (String, u64)>>,
    /// What turns voice notes into text (`voice.stt`), once set.
    pub(crate) transcriber: std::sync::OnceLock<Arc<dyn Transcriber>>,
    /// What speaks answers (`voice.tts`) and when (`voice.reply`, over
    /// which a session's `/voice` wins), once set.
    pub(crate) speech: std::sync::OnceLock<(Arc<dyn Synthesizer>, VoiceReply)>,
}

/// A confirmation waiting for a button press.
pub(crate) struct Waiting {
    pub(crate) channel: String,
    /// Who may press its buttons.
    pub(crate) answerer: Answerer,
    pub(crate) answer: oneshot::Sender<(Decision, String)>,
}

/// Who may answer a confirmation asked in a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answerer {
    /// The channel's owners.
    Owners,
    /// One sender: the guest who asked (`guest_approvals: requester`).
    Sender(String),
}

impl std::fmt::Debug for ChannelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelRouter")
            .field("channels", &self.inner.access.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ChannelRouter {
    /// A router for the channels `config` enables, answering with
    /// `manager`'s sessions through `registry`'s adapters.
    pub fn new(manager: SessionManager, registry: Registry, config: &ChannelsConfig) -> Self {
        let access: HashMap<String, ChannelAccess> = config
            .access()
            .into_iter()
            .map(|(name, access)| (name.to_owned(), access))
            .collect();
        let limiters = access
            .iter()
            .map(|(name, access)| {
                (
                    name.clone(),
                    RateLimiter::new(
                        access.rate_limit.messages,
                        Duration::from_secs(access.rate_limit.per_secs.max(1)),
                    ),
                )
            })
            .collect();
        let workspace = manager.agents().default_agent().workspace().to_path_buf();
        for (name, access) in &access {
            manager.set_channel_guest_tools(name, access.guest_tools.clone());
        }
        ChannelRouter {
            inner: Arc::new(Inner {
                manager,
                registry,
                access,
                limiters: Mutex::new(limiters),
                confirmations: Mutex::new(HashMap::new()),
                owner_chats: Mutex::new(HashMap::new()),
                recent_actions: Mutex::new(VecDeque::new()),
                recent_commands: Mutex::new(VecDeque::new()),
                refusing: Mutex::new(HashMap::new()),
                lines: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
                workspace,
                in_flight: Mutex::new(HashMap::new()),
                transcriber: std::sync::OnceLock::new(),
                speech: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Voice notes are transcribed by `transcriber` before their turn
    /// (without one they are saved as files). Set once, before the
    /// deliveries start; a second call is ignored.
    pub fn set_transcriber(&self, transcriber: Arc<dyn Transcriber>) {
        let _ = self.inner.transcriber.set(transcriber);
    }

    /// Answers are also spoken by `speech` (sent as voice notes) when
    /// `reply` says so, or the session's `/voice` does. Set once, before
    /// the deliveries start; a second call is ignored.
    pub fn set_speech(&self, speech: Arc<dyn Synthesizer>, reply: VoiceReply) {
        let _ = self.inner.speech.set((speech, reply));
    }

    /// Whether the answer to `message` in `session` is spoken too.
    pub(crate) async fn speaks(&self, session: &SessionKey, message: &InboundMessage) -> bool {
        let Some((_, default)) = self.inner.speech.get() else {
            return false;
        };
        let mode = self.voice_mode(session, *default).await;
        match mode {
            VoiceReply::Off => false,
            VoiceReply::Always => true,
            VoiceReply::Auto => message
                .attachments
                .iter()
                .any(|a| a.kind == AttachmentKind::Voice || a.media_type.starts_with("audio/")),
        }
    }

    /// The session's voice reply mode: its `/voice` choice, else `default`.
    pub(crate) async fn voice_mode(&self, session: &SessionKey, default: VoiceReply) -> VoiceReply {
        match self.inner.manager.voice_reply(session).await {
            Ok(mode) => mode,
            Err(e) => {
                tracing::warn!(%session, error = %e, "could not read the session's voice mode; using voice.reply");
                default
            }
        }
    }

    /// Handles deliveries until every sender of `deliveries` is gone:
    /// different chats at once, the messages of one chat in the order
    /// they came (a button press at once).
    pub fn spawn(&self, mut deliveries: mpsc::Receiver<Delivery>) -> JoinHandle<()> {
        let router = self.clone();
        tokio::spawn(async move {
            while let Some(delivery) = deliveries.recv().await {
                router.dispatch(delivery);
            }
        })
    }

    /// Starts handling one delivery: behind its chat's earlier ones, if
    /// any are still being handled.
    pub(crate) fn dispatch(&self, delivery: Delivery) {
        let line = match &delivery.event {
            InboundEvent::Message(message) => {
                format!("{}\n{}", delivery.channel, message.conversation.peer())
            }
            InboundEvent::Action(_) => {
                let router = self.clone();
                self.inner
                    .tasks
                    .spawn(async move { router.handle(delivery).await });
                return;
            }
        };
        {
            let mut lines = lock(&self.inner.lines);
            if let Some(waiting) = lines.get_mut(&line) {
                waiting.push_back(delivery);
                return;
            }
            lines.insert(line.clone(), VecDeque::new());
        }
        let router = self.clone();
        self.inner.tasks.spawn(async move {
            let mut next = Some(delivery);
            while let Some(delivery) = next {
                router.handle(delivery).await;
                let mut lines = lock(&router.inner.lines);
                next = lines.get_mut(&line).and_then(VecDeque::pop_front);
                if next.is_none() {
                    lines.remove(&line);
                }
            }
        });
    }

    /// After a restart, tells each chat what the last process left it:
    /// the outbox's answers (stored, never marked sent; see
    /// [`SessionManager::outbox`]), then the notes of the turns recovery
    /// reported, in turn order, one message at a time per chat, each
    /// once its channel's adapter is up (waiting up to a minute). A turn
    /// recovery runs again is answered as it finishes. Turns of other
    /// sessions are left alone.
    ///
    /// Each message is sent with a key made from its turn
    /// ([`outbound::send_once`]): where the platform keeps such keys
    /// (Discord), a message the last process sent but was killed before
    /// marking is not posted a second time. Elsewhere it can be, which one
    /// message at a time per chat keeps to one message per chat and crash.
    pub fn follow_up(&self, undelivered: Vec<Undelivered>, recovered: Vec<RecoveredTurn>) {
        type Owed = (TurnId, Option<String>, Vec<MediaFile>);
        let mut notes: std::collections::BTreeMap<SessionKey, Vec<Owed>> =
            std::collections::BTreeMap::new();
        for item in undelivered {
            if self.inner.access.contains_key(item.session.channel()) {
                notes
                    .entry(item.session)
                    .or_default()
                    .push((item.turn, item.text, item.files));
            }
        }
        for recovered in recovered {
            if !self.inner.access.contains_key(recovered.session.channel()) {
                continue;
            }
            match recovered.action {
                Recovery::Reported { note } => notes.entry(recovered.session).or_default().push((
                    recovered.turn,
                    Some(note),
                    Vec::new(),
                )),
                Recovery::Rerun(handle) => self.answer_rerun(recovered.session, handle),
            }
        }
        for (session, mut notes) in notes {
            notes.sort_by_key(|(turn, _, _)| *turn);
            let channel = session.channel().to_owned();
            let target = Target::session(&session);
            let router = self.clone();
            self.inner.tasks.spawn(async move {
                let Some(adapter) = router.adapter_when_up(&channel).await else {
                    tracing::warn!(%session, left = notes.len(), "the channel of a chat the last run left answers for is not running; they stay unsent");
                    return;
                };
                for (turn, text, files) in notes {
                    if let Some(text) = text {
                        let key = turn_key(&session, turn);
                        match outbound::send_once(adapter.as_ref(), &target, &text, &[], &key)
                            .await
                        {
                            Ok(_) => {
                                tracing::info!(%session, %turn, "sent what the last run left unsent");
                                router.delivered(turn).await;
                            }
                            Err(e) => {
                                tracing::warn!(channel = adapter.name(), error = %e, %turn, "could not send what the last run left unsent; it is tried again at the next start");
                                continue;
                            }
                        }
                    }
                    // After the answer, as when the turn ran.
                    for file in files {
                        tracing::info!(%session, %turn, file = %file.name, "sending a file the last run left unsent");
                        router.send_file(adapter.as_ref(), &target, &file).await;
                    }
                }
            });
        }
    }

    /// Answers a turn recovery runs again in its chat, as it runs.
    pub(crate) fn answer_rerun(&self, session: SessionKey, handle: TurnHandle) {
        let channel = session.channel().to_owned();
        let target = Target::session(&session);
        // Subscribed now: the turn may start before the adapter is up.
        let followed = handle.follow(self.inner.manager.subscribe(&session));
        let router = self.clone();
        self.inner.tasks.spawn(async move {
            let Some(adapter) = router.adapter_when_up(&channel).await else {
                tracing::warn!(%session, turn = %followed.turn(), "the channel of a turn run again is not running; its answer is kept for the next start");
                return;
            };
            router.respond(adapter, target, followed, false).await;
        });
    }

    /// Records that `turn`'s outcome reached its chat (the outbox's mark).
    pub(crate) async fn delivered(&self, turn: TurnId) {
        // A test stops here as if the process died between the chat
        // getting the message and the mark.
        flynn_protocol::fault::point("answer.mark");
        if let Err(e) = self.inner.manager.mark_delivered(turn).await {
            tracing::warn!(%turn, error = %e, "could not record that an answer was sent; it may be sent again at the next start");
        }
    }

    /// The adapter of `channel` once it is connected (or after
    /// [`RECOVERED_WAIT`], whatever its state).
    pub(crate) async fn adapter_when_up(&self, channel: &str) -> Option<Arc<dyn ChannelAdapter>> {
        let deadline = tokio::time::Instant::now() + RECOVERED_WAIT;
        loop {
            // On standby (another node of a cluster holds the connection)
            // it sends as well as when connected.
            let connected = self.inner.registry.status().iter().any(|status| {
                status.name == channel
                    && matches!(
                        status.state,
                        ChannelState::Connected | ChannelState::Standby
                    )
            });
            if connected || tokio::time::Instant::now() >= deadline {
                return self.inner.registry.get(channel);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (up to `grace`) for answers being sent to finish.
    pub async fn close(&self, grace: Duration) {
        self.inner.tasks.close();
        let _ = tokio::time::timeout(grace, self.inner.tasks.wait()).await;
    }

    /// Handles one delivery and settles it.
    pub async fn handle(&self, delivery: Delivery) {
        let Some(adapter) = self.inner.registry.get(&delivery.channel) else {
            delivery.settle(Disposition::Retry("the channel is not running".to_owned()));
            return;
        };
        let disposition = match &delivery.event {
            InboundEvent::Message(message) => {
                self.message(&delivery.channel, &adapter, message).await
            }
            InboundEvent::Action(action) => self.action(&delivery.channel, &adapter, action).await,
        };
        match &disposition {
            Disposition::Ignored(why) => {
                tracing::debug!(channel = %delivery.channel, why = %why, "inbound ignored");
            }
            Disposition::Retry(why) => {
                let first = {
                    let mut refusing = lock(&self.inner.refusing);
                    let refusal = refusing
                        .entry(delivery.channel.clone())
                        .or_insert_with(|| (String::new(), 0));
                    let first = refusal.0 != *why;
                    refusal.0.clone_from(why);
                    refusal.1 += 1;
                    first
                };
                if first {
                    tracing::warn!(channel = %delivery.channel, why = %why, "inbound not accepted; the platform will deliver it again (said once until one is accepted or the reason changes)");
                } else {
                    tracing::debug!(channel = %delivery.channel, why = %why, "inbound not accepted again");
                }
            }
            Disposition::Accepted | Disposition::Duplicate => {
                if let Some((_, refused)) = lock(&self.inner.refusing).remove(&delivery.channel) {
                    tracing::info!(channel = %delivery.channel, refused, "inbound accepted again after refusals");
                }
            }
        }
        delivery.settle(disposition);
    }

    pub(crate) fn access(&self, channel: &str) -> ChannelAccess {
        self.inner.access.get(channel).cloned().unwrap_or_default()
    }

    /// Whether `sender` is the owner on `channel`: listed in `owners`, or
    /// promoted when paired.
    pub(crate) async fn is_owner(
        &self,
        channel: &str,
        access: &ChannelAccess,
        sender: &str,
    ) -> Result<bool> {
        if access.owners.iter().any(|owner| owner == sender) {
            return Ok(true);
        }
        Ok(self
            .inner
            .manager
            .store()
            .peer_owner(channel, sender)
            .await?)
    }

    /// Whether `sender` may talk to `channel`.
    pub(crate) async fn allowed(
        &self,
        channel: &str,
        access: &ChannelAccess,
        sender: &str,
    ) -> Result<bool> {
        if access.dm_policy == DmPolicy::Open
            || access.allow_from.iter().any(|a| a == "*" || a == sender)
        {
            return Ok(true);
        }
        Ok(self
            .inner
            .manager
            .store()
            .peer_approved(channel, sender)
            .await?)
    }

    pub(crate) async fn message(
        &self,
        channel: &str,
        adapter: &Arc<dyn ChannelAdapter>,
        message: &InboundMessage,
    ) -> Disposition {
        let access = self.access(channel);
        if !access.enabled {
            return Disposition::Ignored("the channel is turned off".to_owned());
        }
        let group = message.conversation.kind == ChatKind::Group;
        let target = Target {
            conversation: message.conversation.clone(),
            reply: message.reply.clone(),
        };
        if group
            && !access.allow_groups.is_empty()
            && !access
                .allow_groups
                .iter()
                .any(|g| g == &message.conversation.chat)
        {
            return Disposition::Ignored("a group not in allow_groups".to_owned());
        }
        if group && access.mention_required(&message.conversation.chat) && !message.mentioned {
            return Disposition::Ignored("a group message without a mention".to_owned());
        }
        let verdict = lock(&self.inner.limiters)
            .get_mut(channel)
            .map_or(Verdict::Allow, |l| l.check(channel, &message.sender.id));
        if let Verdict::Limited { first, retry_in } = verdict {
            if first {
                self.say(
                    adapter,
                    &target,
                    format!(
                        "You are sending messages faster than I can answer. Try again in {} s.",
                        retry_in.as_secs().max(1)
                    ),
                );
            }
            return Disposition::Ignored("over the sender's rate limit".to_owned());
        }
        let owner = match self.is_owner(channel, &access, &message.sender.id).await {
            Ok(owner) => owner,
            Err(e) => return Disposition::Retry(e.to_string()),
        };
        if !owner {
            match self.allowed(channel, &access, &message.sender.id).await {
                Ok(true) => {}
                Ok(false) => return self.pair(channel, adapter, &target, message, &access).await,
                Err(e) => return Disposition::Retry(e.to_string()),
            }
        }
        let principal = if owner {
            if !group {
                lock(&self.inner.owner_chats).insert(channel.to_owned(), target.clone());
            }
            Principal::Owner
        } else {
            Principal::guest(channel, &message.sender.id)
        };

        let session = match SessionKey::new(channel, &message.conversation.peer()) {
            Ok(key) => key,
            Err(e) => return Disposition::Ignored(format!("no session for this chat: {e}")),
        };
        let (content, unheard) = self.content(channel, message).await;
        // Nothing but voice notes that could not be transcribed: the
        // sender is told at once, without a turn the model could only
        // apologise in.
        if !unheard.is_empty()
            && message.text.trim().is_empty()
            && unheard.len() == message.attachments.len()
        {
            self.say(
                adapter,
                &target,
                format!(
                    "I couldn't make out your voice note ({}). Please send it again, or type it.",
                    unheard.join("; ")
                ),
            );
            return Disposition::Ignored("a voice note that could not be transcribed".to_owned());
        }
        if content.is_empty() {
            return Disposition::Ignored("an empty message".to_owned());
        }
        let mut request = TurnRequest::text(session.clone(), "");
        request.content = content;
        request.external_id = Some(message.id.clone());
        request.principal = principal.clone();
        let routed = self
            .inner
            .manager
            .agents()
            .route_sender(channel, &message.sender.id);
        if let Some(agent) = routed
            && agent != self.inner.manager.agents().route(&session).name
        {
            request.agent = Some(agent.to_owned());
        }
        request.approver = Some(match (&principal, access.guest_approvals) {
            (Principal::Guest { id, .. }, GuestApprovals::Requester) => Arc::new(ChannelApprover {
                router: self.clone(),
                adapter: adapter.clone(),
                target: target.clone(),
                channel: channel.to_owned(),
                answerer: Answerer::Sender(id.clone()),
                asked_for: None,
            })
                as Arc<dyn Approver>,
            (Principal::Guest { id, .. }, GuestApprovals::Owner) => Arc::new(OwnerApprover {
                router: self.clone(),
                adapter: adapter.clone(),
                channel: channel.to_owned(),
                guest: message
                    .sender
                    .name
                    .as_ref()
                    .map_or_else(|| id.clone(), |name| format!("{name} ({id})")),
            }),
            _ => Arc::new(ChannelApprover {
                router: self.clone(),
                adapter: adapter.clone(),
                target: target.clone(),
                channel: channel.to_owned(),
                answerer: Answerer::Owners,
                asked_for: None,
            }),
        });
        if Command::parse(&request.content).is_some() {
            return self
                .command(channel, adapter, &target, &session, message, request)
                .await;
        }
        let speak = self.speaks(&session, message).await;
        match self.inner.manager.submit_and_follow(request).await {
            Ok(Followed::Turn(followed)) => {
                let router = self.clone();
                let adapter = adapter.clone();
                let read = message.clone();
                self.inner.tasks.spawn(async move {
                    if let Err(e) = adapter.mark_read(&read).await {
                        tracing::debug!(error = %e, "could not mark the message read");
                    }
                    router.respond(adapter, target, followed, speak).await;
                });
                Disposition::Accepted
            }
            Ok(Followed::Command { reply, .. }) => {
                self.say(adapter, &target, reply);
                Disposition::Accepted
            }
            Err(Error::Storage(flynn_sessions::Error::Duplicate { .. })) => Disposition::Duplicate,
            Err(Error::ShuttingDown) => Disposition::Retry("shutting down".to_owned()),
            Err(e @ (Error::Storage(_) | Error::LaneBusy { .. })) => {
                Disposition::Retry(e.to_string())
            }
            Err(e) => {
                // Refused before anything was stored (a full queue, no
                // model for the tier): the sender is told why.
                self.say(adapter, &target, format!("⚠️ {e}"));
                Disposition::Ignored(e.to_string())
            }
        }
    }

    /// A chat command: settled as soon as its session's lane holds it (in
    /// order with the chat's messages), answered from a task. A command
    /// the platform delivers again (same message id) runs once.
    pub(crate) async fn command(
        &self,
        channel: &str,
        adapter: &Arc<dyn ChannelAdapter>,
        target: &Target,
        session: &SessionKey,
        message: &InboundMessage,
        request: TurnRequest,
    ) -> Disposition {
        let seen = format!("{session} {}", message.id);
        if lock(&self.inner.recent_commands).contains(&seen) {
            return Disposition::Duplicate;
        }
        // `/voice on` with nothing to speak: said with its answer.
        let unspoken = self.inner.speech.get().is_none()
            && matches!(
                Command::parse(&request.content),
                Some(Ok(Command::Voice(VoiceChoice::Set(mode)))) if mode != VoiceReply::Off
            );
        match self.inner.manager.enqueue(request).await {
            Ok(submission) => {
                {
                    let mut recent = lock(&self.inner.recent_commands);
                    recent.push_back(seen);
                    if recent.len() > RECENT_COMMANDS {
                        recent.pop_front();
                    }
                }
                let adapter = adapter.clone();
                let target = target.clone();
                let channel = channel.to_owned();
                self.inner.tasks.spawn(async move {
                    let text = match submission.settled().await {
                        Ok(Submitted::Command { reply, .. })
                            if unspoken && reply.starts_with("Voice replies") =>
                        {
                            format!(
                                "{reply}\n\n_Nothing speaks yet: voice.tts is not set in the daemon's config._"
                            )
                        }
                        Ok(Submitted::Command { reply, .. }) => reply,
                        Ok(Submitted::Turn(_)) => return,
                        Err(e) => format!("⚠️ {e}"),
                    };
                    if let Err(e) = outbound::send(adapter.as_ref(), &target, &text, &[]).await {
                        tracing::warn!(channel, error = %e, "could not send a command's answer");
                    }
                });
                Disposition::Accepted
            }
            Err(Error::ShuttingDown) => Disposition::Retry("shutting down".to_owned()),
            Err(e @ Error::LaneBusy { .. }) => Disposition::Retry(e.to_string()),
            Err(e) => {
                self.say(adapter, target, format!("⚠️ {e}"));
                Disposition::Ignored(e.to_string())
            }
        }
    }

    /// An unknown sender: a pairing code in a direct chat, silence in a
    /// group.
    pub(crate) async fn pair(
        &self,
        channel: &str,
        adapter: &Arc<dyn ChannelAdapter>,
        target: &Target,
        message: &InboundMessage,
        access: &ChannelAccess,
    ) -> Disposition {
        if message.conversation.kind == ChatKind::Group || access.dm_policy != DmPolicy::Pairing {
            return Disposition::Ignored(format!(
                "sender {} is not allowed on {channel}",
                message.sender.id
            ));
        }
        let ticket = match self
            .inner
            .manager
            .store()
            .pairing_request(
                channel,
                &message.sender.id,
                message.sender.name.as_deref(),
                now_millis(),
                CODE_TTL_MS,
            )
            .await
        {
            Ok(ticket) => ticket,
            Err(flynn_sessions::Error::Pairing(PairingError::Full {
                pending, frees_at, ..
            })) => {
                // Earlier requests keep their codes; this one waits.
                tracing::warn!(channel, sender = %message.sender.id, pending, "pairing request refused: the channel has the most pairing codes it keeps waiting (`flynn pairing list`)");
                let mins = (frees_at.saturating_sub(now_millis()) / 60_000).max(0) + 1;
                self.say(
                    adapter,
                    target,
                    format!(
                        "I don't know you yet, and too many people are waiting to be let in right now. Try again in {mins} minutes."
                    ),
                );
                return Disposition::Ignored(format!(
                    "sender {} refused a pairing code: too many are waiting",
                    message.sender.id
                ));
            }
            Err(e) => return Disposition::Retry(e.to_string()),
        };
        if ticket.fresh {
            tracing::info!(
                channel,
                sender = %message.sender.id,
                name = message.sender.name.as_deref().unwrap_or(""),
                code = %ticket.code,
                "pairing requested: approve with `flynn pairing approve {channel} {}`",
                ticket.code
            );
            // Said once: later messages while the code waits get
            // nothing (the code is in the chat already).
            self.say(
                adapter,
                target,
                format!(
                    "I don't know you yet, so I can't answer. If you know my owner, give them this code:\n\n`{code}`\n\nThey approve it with `flynn pairing approve {channel} {code}`. The code expires in {mins} minutes.",
                    code = ticket.code,
                    mins = CODE_TTL_MS / 60_000,
                ),
            );
        }
        Disposition::Ignored(format!("sender {} waits for pairing", message.sender.id))
    }

    /// The message as content blocks: its text, its images, and a note
    /// for each file (saved in the workspace for the file tools).
    ///
    /// Called only once the message passed every access check: this is
    /// where its files are downloaded (through the adapter that received
    /// them), never before. At most [`MAX_ATTACHMENTS`] per message and
    /// [`MAX_ATTACHMENT_BYTES`] each (by the size the platform declared,
    /// before downloading, and again while downloading), within the
    /// channel's [`MAX_BYTES_IN_FLIGHT`]; a file left out is named in the
    /// text the model sees, with the reason.
    ///
    /// Also returns why each voice note that could not be transcribed
    /// was not (the text says so too, for the model).
    pub(crate) async fn content(
        &self,
        channel: &str,
        message: &InboundMessage,
    ) -> (Vec<ContentBlock>, Vec<String>) {
        let mut content = Vec::new();
        let mut unheard = Vec::new();
        let mut text = message.text.trim().to_owned();
        let fetched = self.download(channel, &message.attachments).await;
        for (attachment, data) in message.attachments.iter().zip(fetched) {
            let data = match data {
                Ok(data) => data,
                Err(why) => {
                    text.push_str(&format!(
                        "\n[attachment {} skipped: {why}]",
                        attachment.label()
                    ));
                    continue;
                }
            };
            let transcriber = self.inner.transcriber.get();
            // Platforms that send voice notes as files of an `audio/` type
            // (WhatsApp, Discord, Slack) have them transcribed too.
            let kind = match attachment.kind {
                AttachmentKind::File if attachment.media_type.starts_with("audio/") => {
                    AttachmentKind::Voice
                }
                kind => kind,
            };
            match (kind, transcriber) {
                (AttachmentKind::Image, _) => content.push(ContentBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: attachment.media_type.clone(),
                        data: base64::engine::general_purpose::STANDARD.encode(&data),
                    },
                }),
                (AttachmentKind::Voice, Some(transcriber)) => {
                    let audio = Audio {
                        data: data.clone(),
                        file_name: attachment
                            .name
                            .clone()
                            .unwrap_or_else(|| "voice.ogg".to_owned()),
                        media_type: attachment.media_type.clone(),
                    };
                    match transcriber.transcribe(audio).await {
                        Ok(said) => text.push_str(&format!("\n[voice note, transcribed] {said}")),
                        Err(e) => {
                            tracing::warn!(error = %e, "a voice note could not be transcribed");
                            text.push_str(&format!(
                                "\n[a voice note came with this message but could not be transcribed ({e}); tell the sender]"
                            ));
                            unheard.push(e.to_string());
                        }
                    }
                }
                (AttachmentKind::File | AttachmentKind::Voice, _) => {
                    match self.save(channel, attachment, data.clone()).await {
                        Ok(path) => text.push_str(&format!(
                            "\n[file {} ({}, {} bytes) saved at {}]",
                            attachment.name.as_deref().unwrap_or("unnamed"),
                            attachment.media_type,
                            data.len(),
                            path.display()
                        )),
                        Err(e) => {
                            tracing::warn!(error = %e, "could not save a file from a chat");
                            text.push_str(&format!(
                                "\n[a file came with this message but could not be saved: {e}]"
                            ));
                        }
                    }
                }
            }
        }
        let text = text.trim();
        if !text.is_empty() {
            content.insert(0, ContentBlock::text(text));
        }
        (content, unheard)
    }

    /// Downloads a message's files through `channel`'s adapter, all at
    /// once, each within the limits; one result per attachment, in order,
    /// the error being the reason it was left out.
    pub(crate) async fn download(
        &self,
        channel: &str,
        attachments: &[Attachment],
    ) -> Vec<std::result::Result<Bytes, String>> {
        if attachments.is_empty() {
            return Vec::new();
        }
        let Some(adapter) = self.inner.registry.get(channel) else {
            return attachments
                .iter()
                .map(|_| Err(format!("the {channel} channel is not running")))
                .collect();
        };
        let budget = self.in_flight(channel);
        let fetches = attachments.iter().enumerate().map(|(at, attachment)| {
            let adapter = adapter.clone();
            let budget = budget.clone();
            async move {
                if at >= MAX_ATTACHMENTS {
                    return Err(format!(
                        "a message keeps at most {MAX_ATTACHMENTS} files; send the rest in another message"
                    ));
                }
                let limit = MAX_ATTACHMENT_BYTES as u64;
                if let Some(size) = attachment.size.filter(|size| *size > limit) {
                    return Err(format!(
                        "it has {}, over the {} a chat file may have",
                        megabytes(size),
                        megabytes(limit)
                    ));
                }
                // The platform's declared size is reserved (the whole
                // limit when it declared none).
                let reserve = attachment.size.unwrap_or(limit).min(limit);
                let Ok(_permit) = budget.try_acquire_many_owned(
                    u32::try_from(reserve.max(1)).unwrap_or(u32::MAX),
                ) else {
                    return Err(format!(
                        "more than {} of files are downloading on {} right now; send it again in a moment",
                        megabytes(MAX_BYTES_IN_FLIGHT),
                        adapter.name()
                    ));
                };
                match tokio::time::timeout(DOWNLOAD_TIMEOUT, adapter.download(attachment, limit))
                    .await
                {
                    Ok(Ok(data)) => Ok(data),
                    Ok(Err(e)) => {
                        tracing::warn!(channel = adapter.name(), file = attachment.label(), error = %e, "a file from a chat was not downloaded");
                        Err(format!("could not download it: {e}"))
                    }
                    Err(_) => Err(format!(
                        "the download took longer than {} s",
                        DOWNLOAD_TIMEOUT.as_secs()
                    )),
                }
            }
        });
        futures::future::join_all(fetches).await
    }

    /// The download budget of `channel`: bytes of files it may fetch at
    /// once.
    pub(crate) fn in_flight(&self, channel: &str) -> Arc<Semaphore> {
        lock(&self.inner.in_flight)
            .entry(channel.to_owned())
            .or_insert_with(|| {
                Arc::new(Semaphore::new(
                    usize::try_from(MAX_BYTES_IN_FLIGHT).unwrap_or(usize::MAX),
                ))
            })
            .clone()
    }

    /// Saves a file under `<workspace>/inbox/<channel>/`; returns its path
    /// relative to the workspace. See [`save_in_inbox`].
    pub(crate) async fn save(
        &self,
        channel: &str,
        attachment: &Attachment,
        data: Bytes,
    ) -> std::io::Result<PathBuf> {
        let name = safe_file_name(attachment.name.as_deref().unwrap_or("file"));
        let workspace = self.inner.workspace.clone();
        let channel = channel.to_owned();
        tokio::task::spawn_blocking(move || save_in_inbox(&workspace, &channel, &name, &data))
            .await
            .map_err(std::io::Error::other)?
    }

    pub(crate) async fn action(
        &self,
        channel: &str,
        adapter: &Arc<dyn ChannelAdapter>,
        action: &Action,
    ) -> Disposition {
        {
            let mut recent = lock(&self.inner.recent_actions);
            if recent.contains(&action.id) {
                return Disposition::Duplicate;
            }
            recent.push_back(action.id.clone());
            if recent.len() > RECENT_ACTIONS {
                recent.pop_front();
            }
        }
        let access = self.access(channel);
        let owner = match self.is_owner(channel, &access, &action.sender.id).await {
            Err(e) => return Disposition::Retry(e.to_string()),
            Ok(owner) => owner,
        };
        let (approve, token) = match action.data.split_once(':') {
            Some(("y", token)) => (true, token),
            Some(("n", token)) => (false, token),
            _ => {
                return Disposition::Ignored(format!(
                    "a button this daemon did not send: {}",
                    action.data
                ));
            }
        };
        // `Err(true)`: the presser may not answer it; `Err(false)`: nothing
        // waits under this token (answered, timed out, another channel's).
        let waiting = {
            let mut confirmations = lock(&self.inner.confirmations);
            match confirmations.get(token) {
                Some(w) if w.channel == channel => {
                    let may = match &w.answerer {
                        Answerer::Owners => owner,
                        Answerer::Sender(id) => id == &action.sender.id,
                    };
                    if may {
                        confirmations.remove(token).ok_or(false)
                    } else {
                        Err(true)
                    }
                }
                _ => Err(false),
            }
        };
        let who = action
            .sender
            .name
            .clone()
            .unwrap_or_else(|| action.sender.id.clone());
        let note = match waiting {
            Err(true) => {
                tracing::warn!(channel, sender = %action.sender.id, "refused a confirmation answer from someone who may not give it");
                "You are not allowed to answer this."
            }
            Err(false) => "This request is no longer waiting.",
            Ok(waiting) => {
                let decision = if approve {
                    Decision::Approve
                } else {
                    Decision::Deny {
                        reason: format!("{who} denied it on {channel}"),
                    }
                };
                let _ = waiting.answer.send((decision, who));
                if approve { "Approved" } else { "Denied" }
            }
        };
        let adapter = adapter.clone();
        let action = action.clone();
        self.inner.tasks.spawn(async move {
            if let Err(e) = adapter.answer_action(&action, note).await {
                tracing::debug!(error = %e, "could not answer a button press");
            }
        });
        Disposition::Accepted
    }

    /// Sends a short message in the background.
    pub(crate) fn say(&self, adapter: &Arc<dyn ChannelAdapter>, target: &Target, text: String) {
        let adapter = adapter.clone();
        let target = target.clone();
        self.inner.tasks.spawn(async move {
            if let Err(e) = outbound::send(adapter.as_ref(), &target, &text, &[]).await {
                tracing::warn!(channel = adapter.name(), error = %e, "could not send a message");
            }
        });
    }

    /// Streams a turn's answer to its chat; `speak`: then sends it as a
    /// voice note too.
    pub(crate) async fn respond(
        &self,
        adapter: Arc<dyn ChannelAdapter>,
        target: Target,
        mut followed: TurnEvents,
        speak: bool,
    ) {
        let caps = adapter.capabilities();
        let turn = followed.turn();
        // The outbox sends the answer with the same key if this process
        // dies before marking it (see `follow_up`).
        let key = turn_key(followed.session(), turn);
        let mut typing = tokio::time::interval(TYPING_EVERY);
        let mut draft = String::new();
        let mut tool: Option<String> = None;
        let mut sent: Option<Sent> = None;
        let mut files = Vec::new();
        let mut dirty = false;
        let mut edit_tick =
            tokio::time::interval(caps.edit_interval.max(Duration::from_millis(200)));
        loop {
            tokio::select! {
                event = followed.next() => match event {
                    None => break,
                    Some(Err(_lagged)) => {}
                    Some(Ok(envelope)) if envelope.turn == Some(turn) => match envelope.event {
                        AgentEvent::ContentDelta { text } => {
                            draft.push_str(&text);
                            dirty = true;
                        }
                        AgentEvent::ToolStart { name, .. } => {
                            // Text before a tool call is the model thinking
                            // aloud; the answer comes after.
                            draft.clear();
                            tool = Some(name);
                            dirty = true;
                        }
                        AgentEvent::ToolEnd { .. } => {
                            tool = None;
                            dirty = true;
                        }
                        // Sent after the answer, which then reads above
                        // them ("here is the chart", then the chart).
                        AgentEvent::Media { file } => files.push(file),
                        _ => {}
                    },
                    Some(Ok(_)) => {}
                },
                _ = typing.tick(), if caps.typing => {
                    if let Err(e) = adapter.typing(&target).await {
                        tracing::debug!(error = %e, "typing indicator failed");
                    }
                }
                _ = edit_tick.tick(), if caps.edit && dirty => {
                    dirty = false;
                    let shown = match &tool {
                        Some(name) if draft.trim().is_empty() => format!("_⚙ {name}…_"),
                        _ if draft.trim().is_empty() => continue,
                        _ => format!("{draft} …"),
                    };
                    let mut current = sent.take().unwrap_or_default();
                    if let Err(e) = outbound::show_once(adapter.as_ref(), &target, &mut current, &shown, &[], &key).await {
                        tracing::debug!(error = %e, "could not update the streamed answer");
                    }
                    sent = Some(current);
                }
            }
        }
        let mut spoken = None;
        let text = match followed.outcome().await {
            Ok(outcome) => {
                if speak && !outcome.reply.trim().is_empty() {
                    spoken = Some(outcome.reply.clone());
                }
                let mut text = outcome.reply;
                if let Some(warning) = outcome.warning {
                    text.push_str(&format!("\n\n_⚠️ {warning}_"));
                }
                if text.trim().is_empty() {
                    "(no answer)".to_owned()
                } else {
                    text
                }
            }
            Err(Error::Cancelled) => "_Cancelled._".to_owned(),
            Err(e) => format!("⚠️ {e}"),
        };
        // A test stops here as if the process died between storing the
        // answer and sending it.
        flynn_protocol::fault::point("answer.send");
        let mut current = sent.unwrap_or_default();
        match outbound::show_once(adapter.as_ref(), &target, &mut current, &text, &[], &key).await {
            Ok(()) => self.delivered(turn).await,
            Err(e) => {
                tracing::warn!(channel = adapter.name(), error = %e, "could not send the answer; it is sent again at the next start");
            }
        }
        for file in files {
            self.send_file(adapter.as_ref(), &target, &file).await;
        }
        if let Some(answer) = spoken {
            self.speak(adapter.as_ref(), &target, &answer).await;
        }
    }

    /// Sends `answer` (markdown) spoken, as a voice note; a chat whose
    /// answer could not be spoken is told why.
    pub(crate) async fn speak(&self, adapter: &dyn ChannelAdapter, target: &Target, answer: &str) {
        let Some((speech, _)) = self.inner.speech.get() else {
            return;
        };
        let channel = adapter.name().to_owned();
        let text = speakable(answer);
        let failed = match speech.speak(&text).await {
            Ok(spoken) => {
                let kind = if spoken.is_voice_note() {
                    FileKind::Voice
                } else {
                    FileKind::Audio
                };
                let limit = adapter.upload_limit(kind);
                if limit == 0 {
                    // A platform without files: the text is the answer.
                    return;
                }
                let size = spoken.data.len() as u64;
                if size > limit {
                    format!(
                        "it has {}, over the {} {channel} takes",
                        megabytes(size),
                        megabytes(limit)
                    )
                } else {
                    let file = OutgoingFile {
                        kind,
                        name: spoken.file_name,
                        media_type: spoken.media_type,
                        data: spoken.data,
                        caption: None,
                    };
                    match adapter.send_file(target, &file).await {
                        Ok(_) => return,
                        Err(e) => e.to_string(),
                    }
                }
            }
            Err(e) => e.to_string(),
        };
        tracing::warn!(channel, error = %failed, "could not send a spoken answer");
        let note = format!("🔇 I could not send this answer as a voice note: {failed}.");
        if let Err(e) = outbound::send(adapter, target, &note, &[]).await {
            tracing::warn!(channel, error = %e, "could not say a spoken answer failed");
        }
    }

    /// Sends a file a turn sent ([`AgentEvent::Media`]) natively; a file
    /// the platform cannot take is named in a message saying why. Either
    /// way it is marked sent, so the outbox leaves it alone.
    pub(crate) async fn send_file(
        &self,
        adapter: &dyn ChannelAdapter,
        target: &Target,
        file: &MediaFile,
    ) {
        self.try_send_file(adapter, target, file).await;
        self.inner.manager.media().mark_sent(&file.id).await;
    }

    async fn try_send_file(&self, adapter: &dyn ChannelAdapter, target: &Target, file: &MediaFile) {
        let channel = adapter.name().to_owned();
        let refused = match self.outgoing(adapter, file).await {
            Ok(outgoing) => {
                let long_caption = file
                    .caption
                    .as_ref()
                    .filter(|c| c.chars().count() > OutgoingFile::CAPTION_MAX)
                    .cloned();
                let outgoing = OutgoingFile {
                    caption: if long_caption.is_some() {
                        None
                    } else {
                        outgoing.caption
                    },
                    ..outgoing
                };
                match adapter.send_file(target, &outgoing).await {
                    Ok(_) => {
                        if let Some(caption) = long_caption
                            && let Err(e) = outbound::send(adapter, target, &caption, &[]).await
                        {
                            tracing::warn!(channel, error = %e, "could not send a file's caption");
                        }
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(channel, file = %file.name, error = %e, "could not send a file");
                        e.to_string()
                    }
                }
            }
            Err(why) => why,
        };
        let note = format!("📎 I could not send {}: {refused}.", file.name);
        if let Err(e) = outbound::send(adapter, target, &note, &[]).await {
            tracing::warn!(channel, error = %e, "could not say a file was not sent");
        }
    }

    /// The file behind `file`, ready for `adapter`, or why it cannot go.
    async fn outgoing(
        &self,
        adapter: &dyn ChannelAdapter,
        file: &MediaFile,
    ) -> std::result::Result<OutgoingFile, String> {
        let kind = match file.kind {
            MediaKind::Image => FileKind::Image,
            MediaKind::Document => FileKind::Document,
            MediaKind::Audio => FileKind::Audio,
            MediaKind::Voice => FileKind::Voice,
        };
        let limit = adapter.upload_limit(kind);
        if limit == 0 {
            return Err(format!("{} cannot receive files from me", adapter.name()));
        }
        if file.size > limit {
            return Err(format!(
                "it has {}, over the {} {} takes",
                megabytes(file.size),
                megabytes(limit),
                adapter.name()
            ));
        }
        let data = match self.inner.manager.media().read(&file.id).await {
            Ok(Some((_, data))) => data,
            Ok(None) => return Err("it is no longer kept (files are kept for a week)".to_owned()),
            Err(e) => return Err(format!("it could not be read ({e})")),
        };
        Ok(OutgoingFile {
            kind,
            name: file.name.clone(),
            media_type: file.media_type.clone(),
            data,
            caption: file.caption.clone(),
        })
    }
}

/// What of a markdown answer is read aloud: the words, without markup,
/// code blocks named rather than read, links by their text.
pub(crate) fn speakable(markdown: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            if !in_code {
                out.push_str("(code shown in the chat.)\n");
            }
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut line = trimmed.trim_start_matches(['#', '>']).trim_start();
        for bullet in ["- ", "* ", "+ "] {
            line = line.strip_prefix(bullet).unwrap_or(line);
        }
        let mut rest = line;
        while let Some(open) = rest.find('[') {
            let Some(close) = rest[open..].find("](").map(|at| open + at) else {
                break;
            };
            let Some(end) = rest[close..].find(')').map(|at| close + at) else {
                break;
            };
            out.push_str(&rest[..open]);
            out.push_str(&rest[open + 1..close]);
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out.push('\n');
    }
    out.chars()
        .filter(|c| !matches!(c, '*' | '_' | '`' | '|' | '~'))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// The key the messages of `turn`'s outcome are sent with
/// ([`outbound::send_once`]), the same in every process.
pub(crate) fn turn_key(session: &SessionKey, turn: TurnId) -> String {
    format!("{session} turn {turn}")
}

#[cfg(test)]
mod tests {
    use super::speakable;

    #[test]
    fn answers_are_read_aloud_without_their_markup() {
        assert_eq!(
            speakable(
                "# Plan\n\n**Booked** for _eight_, see [the menu](https://x.test/menu).\n- bring `cash`\n-5 degrees outside\n```sh\nrm -rf /\n```\nDone."
            ),
            "Plan\n\nBooked for eight, see the menu.\nbring cash\n-5 degrees outside\n(code shown in the chat.)\nDone."
        );
    }
}
