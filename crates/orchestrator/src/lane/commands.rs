//! The chat commands a lane answers itself (`/status`, `/model`, `/agent`,
//! `/trust`, `/voice`, `/reset`, `/compact`…), and what a guest may not
//! run.

use std::fmt::Write as _;

use flynn_protocol::config::VoiceReply;

use super::*;
use crate::commands::{HELP, ModelChoice, VoiceChoice};
use crate::compact;
use crate::prompt::PromptContext;

impl Lane {
    pub(super) async fn command(
        &mut self,
        command: Command,
        principal: &Principal,
    ) -> Result<String> {
        let store = self.shared.store.clone();
        if let Principal::Guest { channel, id } = principal {
            if let Some(refusal) = self.guest_refusal(&command, channel, id) {
                return Ok(refusal);
            }
            if let Command::Agent(None) = command {
                let current = self.session_agent().name.clone();
                let mut out = String::from("Agents you can talk to here:");
                for name in self.shared.agents.reachable_by(channel, id, &self.key) {
                    let mark = if name == current {
                        " (this session)"
                    } else {
                        ""
                    };
                    let _ = write!(out, "\n- {name}{mark}");
                }
                return Ok(out);
            }
        }
        match command {
            Command::Help => Ok(HELP.to_owned()),
            Command::Status => self.status().await,
            Command::Reset => {
                self.reset().await?;
                Ok("Conversation reset: this session starts afresh.".to_owned())
            }
            Command::Trust => {
                let Some(source) = lock(&self.taint).take() else {
                    return Ok("Nothing in this session is marked untrusted.".to_owned());
                };
                store.set_taint(&self.key, None).await?;
                self.settings_changed().await;
                Ok(format!(
                    "The untrusted content in this session ({source}) is now trusted: tools no longer ask because of it. Send /trust again after the agent reads anything else from outside."
                ))
            }
            // `SessionManager::submit` answers /cancel without the queue.
            Command::Cancel => Ok("Nothing is running.".to_owned()),
            // `handle` runs /compact as a task of the lane.
            Command::Compact => Ok("Nothing was changed.".to_owned()),
            Command::Model(None) => Ok(self.describe_model()),
            Command::Model(Some(ModelChoice::Tier(tier))) => {
                self.shared.router.check_tier(tier)?;
                self.meta.tier = Some(tier);
                self.meta.model = None;
                store.set_metadata(&self.key, &self.meta).await?;
                self.settings_changed().await;
                Ok(format!("This session now uses {}.", self.describe_choice()))
            }
            Command::Model(Some(ModelChoice::Model(model))) => {
                self.shared.router.check_model(&model)?;
                self.meta.model = Some(model);
                store.set_metadata(&self.key, &self.meta).await?;
                self.settings_changed().await;
                Ok(format!("This session now uses {}.", self.describe_choice()))
            }
            Command::Agent(None) => {
                let current = self.session_agent().name.clone();
                let mut out = String::from("Agents:");
                for name in self.shared.agents.names() {
                    let mark = if name == current {
                        " (this session)"
                    } else {
                        ""
                    };
                    let _ = write!(out, "\n- {name}{mark}");
                }
                Ok(out)
            }
            Command::Agent(Some(name)) => {
                let name = self.shared.agents.lookup(&name, "/agent")?.name.clone();
                self.meta.agent = Some(name.clone());
                store.set_metadata(&self.key, &self.meta).await?;
                self.settings_changed().await;
                Ok(format!("This session now talks to the agent '{name}'."))
            }
            Command::Voice(VoiceChoice::Show) => Ok(format!(
                "{}. Change it with /voice on, /voice auto or /voice off{}.",
                self.describe_voice(),
                if self.meta.voice.is_some() {
                    ", or /voice default for the config's"
                } else {
                    ""
                }
            )),
            Command::Voice(VoiceChoice::Set(mode)) => {
                self.meta.voice = Some(mode);
                store.set_metadata(&self.key, &self.meta).await?;
                self.settings_changed().await;
                Ok(format!("Voice replies: {}.", voice_mode(mode)))
            }
            Command::Voice(VoiceChoice::Default) => {
                self.meta.voice = None;
                store.set_metadata(&self.key, &self.meta).await?;
                self.settings_changed().await;
                Ok(format!("{}.", self.describe_voice()))
            }
        }
    }

    /// The voice reply mode in force and where it comes from: "Voice
    /// replies: auto — a voice note is answered with a voice note (this
    /// session)".
    pub(super) fn describe_voice(&self) -> String {
        let (mode, from) = match self.meta.voice {
            Some(mode) => (mode, "this session"),
            None => (self.shared.voice_default(), "the config's voice.reply"),
        };
        format!("Voice replies: {} ({from})", voice_mode(mode))
    }

    /// Ends the running turn, drops the waiting ones and clears the
    /// session; returns whether it had anything stored.
    pub(super) async fn reset(&mut self) -> Result<bool> {
        if let Some(existed) = self.reset_on_holder().await? {
            self.meta = SessionMeta::default();
            *lock(&self.taint) = None;
            return Ok(existed);
        }
        self.end_running().await;
        self.cancel_queued(|_| true).await;
        let existed = self.shared.store.clear(&self.key).await?;
        self.meta = SessionMeta::default();
        *lock(&self.taint) = None;
        Ok(existed)
    }

    /// Why a guest may not run `command`, if it may not: `/trust` and
    /// changing `/voice` (spoken answers cost more) are the owner's;
    /// `/agent` reaches only the agents routed to the guest; `/model` only
    /// what the agent lists in `models`.
    pub(super) fn guest_refusal(
        &self,
        command: &Command,
        channel: &str,
        sender: &str,
    ) -> Option<String> {
        match command {
            Command::Trust => {
                Some("Only the owner can vouch for untrusted content with /trust.".to_owned())
            }
            Command::Voice(VoiceChoice::Set(_) | VoiceChoice::Default) => {
                Some("Only the owner can change voice replies with /voice.".to_owned())
            }
            Command::Agent(Some(name)) => {
                let reachable = self.shared.agents.reachable_by(channel, sender, &self.key);
                (!reachable.contains(&name.as_str())).then(|| {
                    format!(
                        "You can't switch to the agent '{name}' here. Agents you can talk to: {}.",
                        reachable.join(", ")
                    )
                })
            }
            Command::Model(Some(choice)) => {
                let agent = self.session_agent();
                let wanted = match choice {
                    ModelChoice::Tier(tier) => tier.as_str().to_owned(),
                    ModelChoice::Model(model) => model.to_string(),
                };
                if agent.models.iter().any(|allowed| allowed == &wanted) {
                    return None;
                }
                Some(if agent.models.is_empty() {
                    format!(
                        "The model can't be changed here (the agent '{}' lists no models for guests in agents.list[].models).",
                        agent.name
                    )
                } else {
                    format!(
                        "'{wanted}' is not a model you can pick here. You can pick: {}.",
                        agent.models.join(", ")
                    )
                })
            }
            _ => None,
        }
    }

    /// `/compact`: summarises everything older than the kept turns, as a
    /// task of the lane in the place of a turn. The lane keeps accepting
    /// meanwhile; messages that arrive wait behind the compaction, like
    /// behind a turn, and `/reset` cancels it.
    pub(super) async fn compact(
        &mut self,
        extract: bool,
        reply: oneshot::Sender<Result<Submitted>>,
    ) {
        let name = Command::Compact.name().to_owned();
        let events = self.handle.events.clone();
        let refused = if self.compacting.is_some() {
            Some("The conversation is being compacted already. Nothing more was changed.")
        } else if self.running.is_some() {
            Some(
                "A turn is running; send /compact again when it has finished. Nothing was changed.",
            )
        } else if !self.shared.compaction.enabled {
            Some("Compaction is off (compaction.enabled: false). Nothing was changed.")
        } else {
            None
        };
        if let Some(refused) = refused {
            answer(&events, name, Ok(refused.to_owned()), reply);
            return;
        }
        match self.compact_on_holder(extract).await {
            Ok(true) => {
                let said = "The conversation is being compacted on the node that runs it; its summary replaces the older messages when it is done.";
                answer(&events, name, Ok(said.to_owned()), reply);
                return;
            }
            Ok(false) => {}
            Err(error) => {
                answer(&events, name, Err(error), reply);
                return;
            }
        }
        let agent = self.session_agent().clone();
        let (tier, model) = self.model_choice(&agent, None, None);
        let model = match model {
            Some(model) => model,
            None => match self.shared.router.chain(tier).first() {
                Some(model) => model.clone(),
                None => {
                    let result = self
                        .shared
                        .router
                        .check_tier(tier)
                        .map_err(Error::from)
                        .map(|()| "No model to compact for. Nothing was changed.".to_owned());
                    answer(&events, name, result, reply);
                    return;
                }
            },
        };
        let shared = self.shared.clone();
        let key = self.key.clone();
        let cancel = self.shared.shutdown.child_token();
        self.compacting = Some(cancel.clone());
        self.running = Some(self.shared.tracker.spawn(async move {
            let system = agent
                .prompt
                .build(&PromptContext {
                    session: &key,
                    agent: &agent.name,
                    workspace: agent.workspace(),
                    message: &[],
                    principal: &Principal::Owner,
                })
                .await;
            let tools = shared
                .executor
                .registry()
                .specs_for(agent.policy_for(Some(model.provider())));
            let counter = flynn_models::token_counter(shared.router.token_counting(), model.model());
            let overhead = counter.count_request(Some(&system), &[], &tools);
            let result = match compact::force(&shared, &key, &model, overhead, extract, &cancel)
                .await
            {
                Ok(Some(report)) => {
                    events.publish(None, compact::event(&report));
                    Ok(compact::describe(&report))
                }
                Ok(None) => Ok(format!(
                    "Nothing to compact: the conversation has no more than the last {} turns, which are always kept.",
                    shared.compaction.keep_turns
                )),
                Err(Error::Cancelled) => {
                    Ok("Compaction was cancelled. Nothing was changed.".to_owned())
                }
                Err(error) => Err(error),
            };
            answer(&events, name, result, reply);
        }));
    }

    pub(super) fn describe_choice(&self) -> String {
        let agent = self.session_agent();
        let (tier, model) = self.model_choice(agent, None, None);
        match model {
            Some(model) => format!("the model {model} (no fallback)"),
            None => {
                let chain = self.shared.router.chain(tier);
                match chain.first() {
                    Some(first) => format!("the {tier} tier ({first} first)"),
                    None => format!("the {tier} tier (no model is configured for it)"),
                }
            }
        }
    }

    pub(super) fn describe_model(&self) -> String {
        format!(
            "This session uses {}. Change it with /model <fast|default|complex|local> or /model <provider/model>.",
            self.describe_choice()
        )
    }

    pub(super) async fn status(&self) -> Result<String> {
        let store = &self.shared.store;
        let agent = self.session_agent();
        let (tier, model) = self.model_choice(agent, None, None);
        let model = model.or_else(|| self.shared.router.chain(tier).first().cloned());
        let mut out = format!("Session: {}\nAgent: {}\n", self.key, agent.name);
        let _ = writeln!(out, "Model: {}", self.describe_choice());
        let _ = writeln!(out, "{}", self.describe_voice());
        let history: Vec<Message> = store
            .history(&self.key)
            .await?
            .into_iter()
            .map(|stored| stored.message)
            .collect();
        if let Some(model) = &model {
            let counter =
                flynn_models::token_counter(self.shared.router.token_counting(), model.model());
            let used = counter.count_request(None, &history, &[]);
            let window = self
                .shared
                .router
                .windows()
                .offline(model.provider(), model.model())
                .tokens;
            let percent = used.saturating_mul(100) / usize::try_from(window).unwrap_or(1).max(1);
            let _ = writeln!(
                out,
                "Context: about {used} of {window} tokens ({percent}%), {} messages",
                history.len()
            );
        }
        let totals = store.usage_by_tier(Some(&self.key)).await?;
        let (mut calls, mut input, mut output, mut cost, mut unpriced) = (0, 0, 0, 0.0, 0);
        for (_, total) in &totals {
            calls += total.calls;
            input += total.usage.input_tokens;
            output += total.usage.output_tokens;
            cost += total.cost_usd;
            unpriced += total.unpriced_calls;
        }
        let _ = write!(
            out,
            "This session: {calls} model calls, {input} tokens in, {output} out, ${cost:.4}"
        );
        if unpriced > 0 {
            let _ = write!(out, " ({unpriced} calls with no known price)");
        }
        let running = lock(&self.handle.current).clone();
        match running {
            Some(running) => {
                let _ = write!(
                    out,
                    "\nRunning: turn {} ({} waiting)",
                    running.turn,
                    self.queue.len()
                );
            }
            None if self.compacting.is_some() => {
                let _ = write!(out, "\nCompacting ({} messages waiting)", self.queue.len());
            }
            None if !self.queue.is_empty() => {
                let _ = write!(out, "\nWaiting: {} messages", self.queue.len());
            }
            None => {}
        }
        Ok(out)
    }
}

/// A voice reply mode and what it does, for people.
fn voice_mode(mode: VoiceReply) -> &'static str {
    match mode {
        VoiceReply::Off => "off — answers are text only",
        VoiceReply::Auto => "auto — a voice note is answered with a voice note",
        VoiceReply::Always => "on — every answer is also spoken",
    }
}
