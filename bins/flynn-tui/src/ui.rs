//! Drawing the app: the conversation, the prompt, a status bar, and the
//! session picker or a confirmation over them.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap};

use crate::app::{App, Connection, Entry, ToolState};

pub fn draw(frame: &mut Frame<'_>, app: &App) {
    let input_lines = u16::try_from(app.input.lines().count().max(1))
        .unwrap_or(1)
        .min(6);
    let [body, prompt, status] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(input_lines + 2),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let lines = conversation(app);
    let conversation = Paragraph::new(Text::from(lines)).wrap(Wrap { trim: false });
    // Scrolled to the bottom unless the reader scrolled up.
    let height = conversation.line_count(body.width);
    let total = u16::try_from(height).unwrap_or(u16::MAX);
    let top = total.saturating_sub(body.height).saturating_sub(app.scroll);
    frame.render_widget(conversation.scroll((top, 0)), body);

    let title = if app.running {
        " Esc cancels "
    } else {
        " Enter sends · Alt+Enter new line · Ctrl+S sessions "
    };
    let input = Paragraph::new(app.input.as_str())
        .wrap(Wrap { trim: false })
        .block(Block::default().borders(Borders::ALL).title(title));
    frame.render_widget(input, prompt);

    frame.render_widget(Paragraph::new(status_line(app)), status);

    if let Some(pending) = app.pending.first() {
        let area = centered(frame.area(), 70, 7);
        frame.render_widget(Clear, area);
        let mut text = vec![
            Line::from(vec![
                Span::styled(
                    pending.tool.clone(),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(" wants to run"),
                Span::raw(
                    pending
                        .reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default(),
                ),
            ]),
            Line::from(Span::styled(
                pending.input.clone(),
                Style::new().fg(Color::Yellow),
            )),
            Line::default(),
            Line::from("y approve · n deny"),
        ];
        if app.pending.len() > 1 {
            text.push(Line::from(format!(
                "{} more waiting",
                app.pending.len() - 1
            )));
        }
        let dialog = Paragraph::new(text).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" Confirm tool call "),
        );
        frame.render_widget(dialog, area);
    }

    if let Some(picker) = &app.picker {
        let area = centered(frame.area(), 60, 12);
        frame.render_widget(Clear, area);
        let items: Vec<ListItem<'_>> = if picker.sessions.is_empty() {
            vec![ListItem::new("loading…")]
        } else {
            picker
                .sessions
                .iter()
                .map(|s| match &s.title {
                    Some(title) => ListItem::new(Line::from(vec![
                        Span::raw(title.as_str()),
                        Span::styled(format!("  {}", s.key), Style::new().fg(Color::DarkGray)),
                    ])),
                    None => ListItem::new(s.key.as_str()),
                })
                .collect()
        };
        let list = List::new(items)
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" Sessions · Enter opens · Esc closes "),
            )
            .highlight_style(Style::new().add_modifier(Modifier::REVERSED));
        let mut state = ListState::default().with_selected(Some(picker.selected));
        frame.render_stateful_widget(list, area, &mut state);
    }
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

fn status_line(app: &App) -> Line<'static> {
    let (dot, color) = match app.connection {
        Connection::Up => ("● connected", Color::Green),
        Connection::Connecting => ("○ connecting", Color::Yellow),
        Connection::Down => ("● reconnecting", Color::Red),
    };
    let mut spans = vec![
        Span::styled(dot, Style::new().fg(color)),
        Span::raw(format!("  {}", app.session)),
    ];
    if let Some(model) = &app.model {
        spans.push(Span::raw(format!("  {model}")));
    }
    spans.push(Span::raw(format!(
        "  {} tokens  ${:.4}",
        app.tokens, app.cost_usd
    )));
    if app.running {
        spans.push(Span::styled("  answering…", Style::new().fg(Color::Cyan)));
    }
    Line::from(spans).style(Style::new().add_modifier(Modifier::DIM))
}

fn conversation(app: &App) -> Vec<Line<'static>> {
    let dim = Style::new().add_modifier(Modifier::DIM);
    let mut lines = Vec::new();
    for entry in &app.entries {
        match entry {
            Entry::User(text) => {
                for (i, line) in text.lines().enumerate() {
                    let lead = if i == 0 { "› " } else { "  " };
                    lines.push(Line::from(vec![
                        Span::styled(lead, Style::new().fg(Color::Blue)),
                        Span::styled(line.to_owned(), Style::new().add_modifier(Modifier::BOLD)),
                    ]));
                }
            }
            Entry::Assistant {
                text,
                thinking,
                streaming,
            } => {
                if !thinking.is_empty() {
                    let words = thinking.split_whitespace().count();
                    lines.push(Line::styled(format!("▸ thinking ({words} words)"), dim));
                }
                let mut body = markdown(text);
                if *streaming {
                    match body.last_mut() {
                        Some(last) => last.push_span(Span::raw("▍")),
                        None => body.push(Line::from("▍")),
                    }
                }
                lines.extend(body);
            }
            Entry::Tool {
                name, input, state, ..
            } => {
                let (mark, color) = match state {
                    ToolState::Running => ("… ", Color::Yellow),
                    ToolState::Ok => ("✓ ", Color::Green),
                    ToolState::Failed => ("✗ ", Color::Red),
                };
                lines.push(Line::from(vec![
                    Span::styled(mark, Style::new().fg(color)),
                    Span::styled(format!("{name} {input}"), dim),
                ]));
            }
            Entry::Notice(text) => lines.push(Line::styled(format!("· {text}"), dim)),
            Entry::Error(text) => lines.push(Line::styled(
                format!("error: {text}"),
                Style::new().fg(Color::Red),
            )),
        }
        lines.push(Line::default());
    }
    lines
}

/// Markdown as terminal lines: fenced code in a colour, headings bold,
/// list bullets, `code`, **bold** and *italic* spans. Anything else is
/// shown as written.
pub fn markdown(text: &str) -> Vec<Line<'static>> {
    let code = Style::new().fg(Color::Cyan);
    let mut lines = Vec::new();
    let mut in_fence = false;
    for raw in text.lines() {
        let trimmed = raw.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            lines.push(Line::styled(format!("  {raw}"), code));
            continue;
        }
        if let Some(heading) = trimmed
            .strip_prefix("### ")
            .or_else(|| trimmed.strip_prefix("## "))
            .or_else(|| trimmed.strip_prefix("# "))
        {
            lines.push(Line::styled(
                heading.to_owned(),
                Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            ));
            continue;
        }
        if let Some(item) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
        {
            let indent = raw.len() - trimmed.len();
            let mut spans = vec![Span::raw(format!("{}• ", " ".repeat(indent)))];
            spans.extend(inline(item));
            lines.push(Line::from(spans));
            continue;
        }
        lines.push(Line::from(inline(raw)));
    }
    lines
}

fn inline(text: &str) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let next = [
            ("`", Style::new().fg(Color::Cyan)),
            ("**", Style::new().add_modifier(Modifier::BOLD)),
            ("*", Style::new().add_modifier(Modifier::ITALIC)),
        ]
        .into_iter()
        .filter_map(|(mark, style)| {
            let start = rest.find(mark)?;
            let end = rest[start + mark.len()..].find(mark)? + start + mark.len();
            (end > start + mark.len()).then_some((start, end, mark, style))
        })
        .min_by_key(|(start, ..)| *start);
        match next {
            Some((start, end, mark, style)) => {
                if start > 0 {
                    spans.push(Span::raw(rest[..start].to_owned()));
                }
                spans.push(Span::styled(
                    rest[start + mark.len()..end].to_owned(),
                    style,
                ));
                rest = &rest[end + mark.len()..];
            }
            None => {
                spans.push(Span::raw(rest.to_owned()));
                break;
            }
        }
    }
    spans
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::app::Action;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use flynn_protocol::{AgentEvent, EventEnvelope, RunState, SessionKey, TurnId};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use serde_json::json;

    fn envelope(seq: u64, event: AgentEvent) -> EventEnvelope {
        EventEnvelope {
            session: "tui:test".parse::<SessionKey>().unwrap(),
            turn: Some(TurnId(1)),
            seq,
            time_ms: 0,
            event,
        }
    }

    /// The screen after these events, as text.
    fn screen(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| draw(frame, app)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..buffer.area.height {
            let line: String = (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol().to_owned())
                .collect();
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn app_with_a_turn() -> App {
        let mut app = App::new("tui:test");
        app.connection = Connection::Up;
        for c in "list the files".chars() {
            app.key(key(KeyCode::Char(c)));
        }
        assert_eq!(
            app.key(key(KeyCode::Enter)),
            Some(Action::Send("list the files".to_owned()))
        );
        let events = [
            AgentEvent::RunState {
                state: RunState::Start,
            },
            AgentEvent::Thinking {
                text: "The user wants a listing.".into(),
            },
            AgentEvent::ToolStart {
                id: "c1".into(),
                name: "shell.exec".into(),
                input: json!({"command": "ls"}),
            },
            AgentEvent::ToolEnd {
                id: "c1".into(),
                name: "shell.exec".into(),
                ok: true,
                output: "Cargo.toml\nsrc\n".into(),
            },
            AgentEvent::ContentDelta {
                text: "There are **two** entries:\n\n- `Cargo.toml`\n".into(),
            },
            AgentEvent::ContentDelta {
                text: "- `src`\n\n```sh\nls\n```".into(),
            },
        ];
        for (seq, event) in events.into_iter().enumerate() {
            app.apply(&envelope(seq as u64, event));
        }
        app
    }

    #[test]
    fn a_streaming_turn_with_a_tool_call() {
        let app = app_with_a_turn();
        insta::assert_snapshot!(screen(&app, 60, 20));
    }

    #[test]
    fn a_finished_turn_shows_model_and_usage() {
        let mut app = app_with_a_turn();
        app.apply(&envelope(
            7,
            AgentEvent::Done {
                outcome: flynn_protocol::TurnOutcome {
                    reply: "There are two entries".into(),
                    provider: "openai".into(),
                    model: "gpt-4o-mini".into(),
                    usage: flynn_protocol::Usage {
                        input_tokens: 120,
                        output_tokens: 30,
                        ..Default::default()
                    },
                    cost_usd: Some(0.0012),
                    tool_calls: Vec::new(),
                    warning: None,
                    timing: None,
                },
            },
        ));
        app.apply(&envelope(
            8,
            AgentEvent::RunState {
                state: RunState::Complete,
            },
        ));
        insta::assert_snapshot!(screen(&app, 60, 20));
    }

    #[test]
    fn a_confirmation_is_asked_and_answered_with_y_or_n() {
        let mut app = App::new("tui:test");
        app.connection = Connection::Up;
        app.apply(&envelope(
            0,
            AgentEvent::RunState {
                state: RunState::Start,
            },
        ));
        app.apply(&envelope(
            1,
            AgentEvent::ConfirmationRequested {
                id: "c9".into(),
                name: "file.write".into(),
                input: json!({"path": "notes.md", "content": "hello"}),
                effect: flynn_protocol::ToolEffect::WritesFiles,
                timeout_secs: 120,
                reason: None,
            },
        ));
        insta::assert_snapshot!(screen(&app, 60, 16));
        assert_eq!(
            app.key(key(KeyCode::Char('n'))),
            Some(Action::Resolve {
                id: "c9".into(),
                approve: false
            })
        );
        // Esc cancels the running turn.
        assert_eq!(app.key(key(KeyCode::Esc)), Some(Action::Cancel));
        app.apply(&envelope(
            2,
            AgentEvent::RunState {
                state: RunState::Cancelled,
            },
        ));
        assert!(!app.running);
    }

    #[test]
    fn the_session_picker_lists_and_opens() {
        let mut app = App::new("tui:test");
        app.connection = Connection::Down;
        assert_eq!(
            app.key(KeyEvent::new(KeyCode::Char('s'), KeyModifiers::CONTROL)),
            Some(Action::ListSessions)
        );
        let entry = |key: &str, title: Option<&str>| crate::app::PickerEntry {
            key: key.into(),
            title: title.map(Into::into),
        };
        app.picker.as_mut().unwrap().sessions = vec![
            entry("tui:test", None),
            entry("cli:work", Some("what changed in the release notes")),
            entry("web:2bc6baf3295b", Some("plan the trip to Lyon")),
        ];
        app.key(key(KeyCode::Down));
        insta::assert_snapshot!(screen(&app, 60, 16));
        assert_eq!(
            app.key(key(KeyCode::Enter)),
            Some(Action::Open("cli:work".into()))
        );
        assert!(app.picker.is_none());
    }

    #[test]
    fn multi_line_input_and_scrollback() {
        let mut app = App::new("tui:test");
        for c in "first".chars() {
            app.key(key(KeyCode::Char(c)));
        }
        app.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
        for c in "second".chars() {
            app.key(key(KeyCode::Char(c)));
        }
        assert_eq!(app.input, "first\nsecond");
        app.key(key(KeyCode::PageUp));
        assert_eq!(app.scroll, 10);
        app.key(key(KeyCode::PageDown));
        assert_eq!(app.scroll, 0);
    }
}
