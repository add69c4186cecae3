//! The frame without colours, for `NO_COLOR` ([`crate::colour`]): every cell's foreground
//! and background go back to the terminal's own, modifiers stay. A cell painted on a
//! background colour is a highlight (the tab bar's current screen, the table's cursor, the
//! focused field), so it turns to reverse video and stays visible.

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

/// Removes the colours of every cell of `buffer`.
pub fn strip(buffer: &mut Buffer) {
    for cell in &mut buffer.content {
        if cell.bg != Color::Reset {
            cell.modifier.insert(Modifier::REVERSED);
        }
        cell.fg = Color::Reset;
        cell.bg = Color::Reset;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::layout::Rect;
    use ratatui::style::Style;

    #[test]
    fn highlights_turn_to_reverse_video_and_modifiers_stay() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, 3, 1));
        buffer[(0, 0)].set_style(Style::default().fg(Color::Red).add_modifier(Modifier::BOLD));
        buffer[(1, 0)].set_style(Style::default().fg(Color::Black).bg(Color::Cyan));
        strip(&mut buffer);
        assert!(buffer.content.iter().all(|c| c.fg == Color::Reset && c.bg == Color::Reset));
        assert_eq!(buffer[(0, 0)].modifier, Modifier::BOLD);
        assert_eq!(buffer[(1, 0)].modifier, Modifier::REVERSED);
        assert_eq!(buffer[(2, 0)].modifier, Modifier::empty());
    }
}
