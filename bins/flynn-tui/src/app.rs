//! What the TUI shows, and how events and keys change it. No I/O here:
//! `main.rs` feeds it events from the gateway and keys from the terminal,
//! and carries out the [`Action`]s it returns.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use flynn_protocol::{AgentEvent, ContentBlock, EventEnvelope, Message, Role, RunState};
use serde_json::Value;

/// One entry of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    User(String),
    Assistant {
        text: String,
        thinking: String,
        streaming: bool,
    },
    Tool {
        id: String,
        name: String,
        input: String,
        state: ToolState,
    },
    Notice(String),
    Error(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolState {
    Running,
    Ok,
    Failed,
}

/// A tool call waiting for the person at the keyboard.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub id: String,
    pub tool: String,
    pub input: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Up,
    Down,
}

/// What the app wants done.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Send(String),
    Cancel,
    Resolve {
        id: String,
        approve: bool,
    },
    /// Switch to this session (load its history, follow its events).
    Open(String),
    /// Ask for the session list (for the picker).
    ListSessions,
    Quit,
}

/// The session picker.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Picker {
    pub sessions: Vec<PickerEntry>,
    pub selected: usize,
}

/// One session in the picker: its key, and its title when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickerEntry {
    pub key: String,
    pub title: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub session: String,
    pub entries: Vec<Entry>,
    pub input: String,
    pub running: bool,
    pub connection: Connection,
    pub pending: Vec<Pending>,
    pub picker: Option<Picker>,
    /// Lines scrolled up from the bottom.
    pub scroll: u16,
    pub model: Option<String>,
    pub tokens: u64,
    pub cost_usd: f64,
}

impl App {
    pub fn new(session: impl Into<String>) -> Self {
        App {
            session: session.into(),
            entries: Vec::new(),
            input: String::new(),
            running: false,
            connection: Connection::Connecting,
            pending: Vec::new(),
            picker: None,
            scroll: 0,
            model: None,
            tokens: 0,
            cost_usd: 0.0,
        }
    }

    /// Replaces the conversation with a session's stored messages.
    pub fn load_history(&mut self, messages: &[Message]) {
        self.entries.clear();
        self.pending.clear();
        self.running = false;
        for message in messages {
            match message.role {
                Role::User => {
                    let text = message.text();
                    if !text.is_empty() {
                        self.entries.push(Entry::User(text));
                    }
                    for block in &message.content {
                        if let ContentBlock::ToolResult {
                            tool_use_id,
                            is_error,
                            ..
                        } = block
                        {
                            self.finish_tool(tool_use_id, !is_error);
                        }
                    }
                }
                Role::Assistant => {
                    let mut thinking = String::new();
                    for block in &message.content {
                        if let ContentBlock::Thinking { thinking: t, .. } = block {
                            thinking.push_str(t);
                        }
                    }
                    let text = message.text();
                    if !text.is_empty() || !thinking.is_empty() {
                        self.entries.push(Entry::Assistant {
                            text,
                            thinking,
                            streaming: false,
                        });
                    }
                    for block in &message.content {
                        if let ContentBlock::ToolUse { id, name, input } = block {
                            self.entries.push(Entry::Tool {
                                id: id.clone(),
                                name: name.clone(),
                                input: brief(input),
                                state: ToolState::Running,
                            });
                        }
                    }
                }
            }
        }
        // A tool use without a result in the history was cut short.
        for entry in &mut self.entries {
            if let Entry::Tool { state, .. } = entry
                && *state == ToolState::Running
            {
                *state = ToolState::Failed;
            }
        }
    }

    fn finish_tool(&mut self, call: &str, ok: bool) {
        for entry in self.entries.iter_mut().rev() {
            if let Entry::Tool { id, state, .. } = entry
                && id == call
            {
                *state = if ok { ToolState::Ok } else { ToolState::Failed };
                return;
            }
        }
    }

    fn streaming_text(&mut self) -> &mut Entry {
        let open = matches!(
            self.entries.last(),
            Some(Entry::Assistant {
                streaming: true,
                ..
            })
        );
        if !open {
            self.entries.push(Entry::Assistant {
                text: String::new(),
                thinking: String::new(),
                streaming: true,
            });
        }
        let last = self.entries.len() - 1;
        &mut self.entries[last]
    }

    fn close_stream(&mut self) {
        if let Some(Entry::Assistant { streaming, .. }) = self.entries.last_mut() {
            *streaming = false;
        }
    }

    /// One event of the followed session.
    pub fn apply(&mut self, envelope: &EventEnvelope) {
        if envelope.session.as_str() != self.session {
            return;
        }
        match &envelope.event {
            AgentEvent::RunState { state } => match state {
                RunState::Start => self.running = true,
                RunState::Complete | RunState::Error => {
                    self.close_stream();
                    self.running = false;
                }
                RunState::Cancelled => {
                    self.close_stream();
                    self.running = false;
                    self.entries.push(Entry::Notice("cancelled".to_owned()));
                }
                RunState::CancelRequested => {}
            },
            AgentEvent::ContentDelta { text } => {
                if let Entry::Assistant { text: all, .. } = self.streaming_text() {
                    all.push_str(text);
                }
            }
            AgentEvent::Thinking { text } => {
                if let Entry::Assistant { thinking, .. } = self.streaming_text() {
                    thinking.push_str(text);
                }
            }
            AgentEvent::ToolStart { id, name, input } => {
                self.close_stream();
                self.entries.push(Entry::Tool {
                    id: id.clone(),
                    name: name.clone(),
                    input: brief(input),
                    state: ToolState::Running,
                });
            }
            AgentEvent::ToolEnd { id, ok, .. } => self.finish_tool(id, *ok),
            AgentEvent::ConfirmationRequested {
                id,
                name,
                input,
                reason,
                ..
            } => {
                self.close_stream();
                self.pending.push(Pending {
                    id: id.clone(),
                    tool: name.clone(),
                    input: brief(input),
                    reason: reason.clone(),
                });
            }
            AgentEvent::ConfirmationResolved { id, resolution } => {
                self.pending.retain(|p| &p.id != id);
                let word = serde_json::to_value(resolution)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                self.entries.push(Entry::Notice(format!(
                    "confirmation {}",
                    word.replace('_', " ")
                )));
            }
            AgentEvent::Warning { message } => self.entries.push(Entry::Notice(message.clone())),
            AgentEvent::Error { message, .. } => {
                self.close_stream();
                self.entries.push(Entry::Error(message.clone()));
            }
            AgentEvent::Done { outcome } => {
                if !outcome.model.is_empty() {
                    self.model = Some(format!("{}/{}", outcome.provider, outcome.model));
                }
                self.tokens += outcome.usage.input_tokens + outcome.usage.output_tokens;
                self.cost_usd += outcome.cost_usd.unwrap_or(0.0);
            }
            AgentEvent::Queued { ahead } => self
                .entries
                .push(Entry::Notice(format!("queued behind {ahead} turn(s)"))),
            AgentEvent::Compaction { replaced, .. } => self.entries.push(Entry::Notice(format!(
                "{replaced} older messages were summarised"
            ))),
            AgentEvent::Interrupted { message, .. } => {
                self.entries.push(Entry::Notice(message.clone()));
            }
            AgentEvent::Command { reply, .. } => self.entries.push(Entry::Assistant {
                text: reply.clone(),
                thinking: String::new(),
                streaming: false,
            }),
            AgentEvent::Media { file } => self.entries.push(Entry::Notice(format!(
                "sent {} {} ({} bytes){}",
                file.kind.as_str(),
                file.name,
                file.size,
                file.caption
                    .as_deref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            ))),
        }
        self.scroll = 0;
    }

    /// A key from the terminal.
    pub fn key(&mut self, key: KeyEvent) -> Option<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c' | 'd')) {
            return Some(Action::Quit);
        }
        if let Some(picker) = &mut self.picker {
            match key.code {
                KeyCode::Esc => self.picker = None,
                KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
                KeyCode::Down if picker.selected + 1 < picker.sessions.len() => {
                    picker.selected += 1;
                }
                KeyCode::Enter => {
                    let chosen = picker.sessions.get(picker.selected).map(|s| s.key.clone());
                    self.picker = None;
                    return chosen.map(Action::Open);
                }
                _ => {}
            }
            return None;
        }
        if let Some(first) = self.pending.first().cloned()
            && self.input.is_empty()
        {
            match key.code {
                KeyCode::Char('y') => {
                    return Some(Action::Resolve {
                        id: first.id,
                        approve: true,
                    });
                }
                KeyCode::Char('n') => {
                    return Some(Action::Resolve {
                        id: first.id,
                        approve: false,
                    });
                }
                _ => {}
            }
        }
        match key.code {
            KeyCode::Esc if self.running => return Some(Action::Cancel),
            KeyCode::Char('s') if ctrl => {
                self.picker = Some(Picker::default());
                return Some(Action::ListSessions);
            }
            KeyCode::Char('j') if ctrl => self.input.push('\n'),
            KeyCode::Enter if key.modifiers.contains(KeyModifiers::ALT) => self.input.push('\n'),
            KeyCode::Enter => {
                let text = std::mem::take(&mut self.input);
                if text.trim().is_empty() {
                    return None;
                }
                if !text.starts_with('/') {
                    self.entries.push(Entry::User(text.clone()));
                }
                self.scroll = 0;
                return Some(Action::Send(text));
            }
            KeyCode::Backspace => {
                self.input.pop();
            }
            KeyCode::PageUp => self.scroll = self.scroll.saturating_add(10),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Char(c) if !ctrl => self.input.push(c),
            _ => {}
        }
        None
    }
}

/// A tool input on one short line.
fn brief(input: &Value) -> String {
    let text = match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}…")
    } else {
        text
    }
}
