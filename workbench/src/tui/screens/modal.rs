//! The dialogs over a screen: a confirmation before something is lost, the notes and tags
//! editor, the tags of several runs, the settings of an evaluation, the path of an experiment file to load or save, and the runs table's column chooser. While one is open it takes every key.

use crate::tui::app::{App, Confirmed, Modal};
use crate::tui::service::Request;
use crate::tui::ui::{bold, centred, dim};
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// A key while `modal` is open (taken out of the app; put back unless the key closes it).
pub fn key(app: &mut App, modal: Modal, key: KeyEvent) {
    match modal {
        Modal::Columns { cursor } => super::columns::key(app, cursor, key),
        Modal::Confirm { action, question } => match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') => match action {
                Confirmed::Delete(ids) => {
                    app.runs.selected.retain(|id| !ids.contains(id));
                    app.send(Request::Delete(ids));
                }
                Confirmed::Cancel(ids) => {
                    // Those that ended since the question was asked are left.
                    let live = |id: &i64| app.snapshot.run(*id).is_some_and(|r| !r.status.is_terminal());
                    let ids: Vec<i64> = ids.into_iter().filter(live).collect();
                    for id in ids {
                        app.send(Request::Cancel(id));
                    }
                }
                Confirmed::Overwrite(path) => super::launch::save_file(app, &path),
            },
            KeyCode::Char('n') | KeyCode::Esc => {}
            _ => app.modal = Some(Modal::Confirm { question, action }),
        },
        Modal::Annotate { id, mut notes, mut tags, mut on_tags } => {
            match key.code {
                KeyCode::Esc => return,
                KeyCode::Enter => match crate::ops::runs::parse_tags(&tags) {
                    Ok(tags) => return app.send(Request::Annotate { id, notes, tags }),
                    // The dialog stays open with what was typed, the tags field focused.
                    Err(e) => {
                        app.say(format!("{e:#}"), true);
                        on_tags = true;
                    }
                },
                KeyCode::Tab | KeyCode::BackTab | KeyCode::Up | KeyCode::Down => on_tags = !on_tags,
                code => type_into(if on_tags { &mut tags } else { &mut notes }, code),
            }
            app.modal = Some(Modal::Annotate { id, notes, tags, on_tags });
        }
        Modal::Tags { ids, mut text } => {
            match key.code {
                KeyCode::Esc => return,
                KeyCode::Enter => match crate::ops::runs::TagEdit::parse(&text) {
                    Ok(edit) => return app.send(Request::Retag { ids, edit }),
                    Err(e) => app.say(format!("{e:#}"), true),
                },
                code => type_into(&mut text, code),
            }
            app.modal = Some(Modal::Tags { ids, text });
        }
        Modal::Evaluate { ids, mut text } => {
            match key.code {
                KeyCode::Esc => return,
                KeyCode::Enter => match evaluation_overrides(&text) {
                    Ok(overrides) => {
                        app.last_evaluation = text;
                        return app.send(Request::Evaluate { ids, overrides });
                    }
                    Err(e) => app.say(e, true),
                },
                code => type_into(&mut text, code),
            }
            app.modal = Some(Modal::Evaluate { ids, text });
        }
        Modal::ExperimentFile { save, mut path } => {
            match key.code {
                KeyCode::Esc => return,
                KeyCode::Enter if path.trim().is_empty() => {
                    app.say("give the file's path, e.g. experiments/sudoku-hyperset.toml", true)
                }
                KeyCode::Enter if save && std::path::Path::new(path.trim()).exists() => {
                    // Its comments, and whatever the form does not hold, would be lost.
                    let path = path.trim().to_string();
                    let question = format!(
                        "{path} exists. Replace it with the form? Its comments and any keys the form does not \
                         hold are lost."
                    );
                    app.modal = Some(Modal::Confirm { question, action: Confirmed::Overwrite(path) });
                    return;
                }
                KeyCode::Enter if save => return super::launch::save_file(app, path.trim()),
                KeyCode::Enter => return super::launch::load_file(app, path.trim()),
                code => type_into(&mut path, code),
            }
            app.modal = Some(Modal::ExperimentFile { save, path });
        }
    }
}

/// A key typed into a dialog's text field: a character added, Backspace taking the last.
fn type_into(text: &mut String, code: KeyCode) {
    match code {
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Char(c) => text.push(c),
        _ => {}
    }
}

/// The settings typed in the evaluation dialog, `key=value` separated by spaces.
fn evaluation_overrides(text: &str) -> Result<Vec<String>, String> {
    let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    match words.iter().find(|w| !w.contains('=') || w.starts_with('=')) {
        Some(word) => Err(format!("`{word}` is not a setting: write key=value, e.g. eval_depths=2,4 difficulty=hard")),
        None => Ok(words),
    }
}

/// Draws the open dialog over the frame.
pub fn draw(frame: &mut Frame, app: &App, modal: &Modal) {
    let area = frame.area();
    match modal {
        Modal::Columns { cursor } => super::columns::draw(frame, app, *cursor),
        Modal::Confirm { question, .. } => {
            // Tall enough for the whole question: it names every run it acts on.
            let lines = super::help::wrap(question, 68).len() as u16;
            let rect = centred(area, 72, lines + 5);
            frame.render_widget(Clear, rect);
            let text = vec![
                Line::from(question.clone()),
                Line::from(""),
                Line::from(vec![
                    Span::styled("y", bold().fg(Color::Cyan)),
                    Span::raw(" yes    "),
                    Span::styled("n / Esc", bold().fg(Color::Cyan)),
                    Span::raw(" no"),
                ]),
            ];
            frame.render_widget(
                Paragraph::new(text).wrap(Wrap { trim: true }).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title("Confirm")
                        .border_style(Style::default().fg(Color::Yellow)),
                ),
                rect,
            );
        }
        Modal::ExperimentFile { save, path } => {
            let rect = centred(area, 70, 7);
            frame.render_widget(Clear, rect);
            let (title, verb) = if *save {
                ("Save the form as an experiment file", "save")
            } else {
                ("Load an experiment file", "load")
            };
            let text = vec![
                Line::from(vec![
                    Span::styled("path   ", bold()),
                    Span::styled(format!("{path}▏"), Style::default().fg(Color::Cyan)),
                ]),
                Line::from(Span::styled("       TOML with [layer], [task], [train] and [sweep] tables", dim())),
                Line::from(""),
                Line::from(Span::styled(format!("Enter {verb} · Esc cancel"), dim())),
            ];
            frame.render_widget(
                Paragraph::new(text)
                    .wrap(Wrap { trim: false })
                    .block(Block::default().borders(Borders::ALL).title(title)),
                rect,
            );
        }
        Modal::Tags { ids, text } => draw_tags(frame, app, ids, text),
        Modal::Evaluate { ids, text } => {
            let rect = centred(area, 76, 9);
            frame.render_widget(Clear, rect);
            let lines = vec![
                Line::from(vec![
                    Span::styled("with   ", bold()),
                    Span::styled(format!("{text}▏"), Style::default().fg(Color::Cyan)),
                ]),
                Line::from(Span::styled(
                    "       eval_depths=2,4 eval_examples=1000 difficulty=hard iterations=16",
                    dim(),
                )),
                Line::from(Span::styled(
                    "       each becomes a new run tagged eval; empty: the runs' own settings",
                    dim(),
                )),
                Line::from(""),
                Line::from(Span::styled("Enter evaluate · Esc cancel", dim())),
            ];
            let title = match ids.as_slice() {
                [id] => format!("Evaluate run {id}'s checkpoint again"),
                _ => format!("Evaluate the checkpoints of the {} marked runs again", ids.len()),
            };
            let block = Block::default().borders(Borders::ALL).title(title);
            frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).block(block), rect);
        }
        Modal::Annotate { id, notes, tags, on_tags } => {
            let rect = centred(area, 70, 9);
            frame.render_widget(Clear, rect);
            let field = |label: &str, value: &str, focused: bool| {
                Line::from(vec![
                    Span::styled(format!("{label:<7}"), bold()),
                    Span::styled(
                        format!("{value}{}", if focused { "▏" } else { "" }),
                        if focused { Style::default().fg(Color::Cyan) } else { Style::default() },
                    ),
                ])
            };
            let text = vec![
                field("notes", notes, !on_tags),
                Line::from(""),
                field("tags", tags, *on_tags),
                Line::from(Span::styled("       comma-separated", dim())),
                Line::from(""),
                Line::from(Span::styled("Tab switch field · Enter save · Esc cancel", dim())),
            ];
            frame.render_widget(
                Paragraph::new(text)
                    .wrap(Wrap { trim: false })
                    .block(Block::default().borders(Borders::ALL).title(format!("Run {id}: notes and tags"))),
                rect,
            );
        }
    }
}

/// The tag dialog of several runs: what they are tagged with now, and the edit typed.
fn draw_tags(frame: &mut Frame, app: &App, ids: &[i64], text: &str) {
    let rect = centred(frame.area(), 70, 8);
    frame.render_widget(Clear, rect);
    let mut now: Vec<&str> = Vec::new();
    for run in app.snapshot.runs.iter().filter(|r| ids.contains(&r.id)) {
        for tag in &run.tags {
            if !now.contains(&tag.as_str()) {
                now.push(tag);
            }
        }
    }
    let now = if now.is_empty() { "none".to_string() } else { now.join(", ") };
    let lines = vec![
        Line::from(vec![Span::styled("now    ", bold()), Span::raw(now)]),
        Line::from(""),
        Line::from(vec![
            Span::styled("tags   ", bold()),
            Span::styled(format!("{text}▏"), Style::default().fg(Color::Cyan)),
        ]),
        Line::from(Span::styled("       a,b replaces their tags · +a,-b adds and removes", dim())),
        Line::from(""),
        Line::from(Span::styled("Enter save · Esc cancel", dim())),
    ];
    let title = match ids {
        [id] => format!("Tags of run {id}"),
        _ => format!("Tags of the {} marked runs", ids.len()),
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).block(block), rect);
}
