//! Which columns of the runs table fit the terminal, and how wide each is. The core columns
//! (id, status, progress, best metric) get their full width first, so a number is never cut;
//! configuration columns share what is left and are dropped from the right, the table then
//! saying how many it left out; a free-text column (a sweep's name, tags) that does not fit
//! whole is cut to the room left instead, as long as a few characters still show.

use super::runs::Column;

/// The columns shown and their widths; `hidden` counts the ones that did not fit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fitted {
    pub columns: Vec<Column>,
    pub widths: Vec<u16>,
    pub hidden: usize,
}

/// Widest a configuration column gets (its longer values are cut).
fn cap(c: &Column) -> u16 {
    match c {
        Column::Tags => 22,
        // Sweep names say what varies (`2 hyperset on sudoku: lr x seed`).
        Column::Sweep => 28,
        // Plugin names are whole words (`energy-transformer`): cut, two look alike.
        Column::Layer | Column::Task => 24,
        _ => 16,
    }
}

/// Narrowest a free-text column is cut to where it does not fit whole (`2 welcome…`); other
/// configuration columns are shown at their width or not at all.
fn narrowest(c: &Column) -> Option<u16> {
    matches!(c, Column::Sweep | Column::Tags).then_some(8)
}

/// `+3 hidden`: what the header says when columns did not fit.
pub fn hidden_note(n: usize) -> String {
    format!("+{n} hidden")
}

/// Fits `columns` (core ones first), whose content is `natural` cells wide, into `width`
/// cells with one cell between columns.
pub fn fit(columns: &[Column], natural: &[u16], width: u16) -> Fitted {
    let wanted: Vec<Wanted> = columns
        .iter()
        .zip(natural)
        .map(|(c, &w)| match (c.is_core(), narrowest(c)) {
            (true, _) => Wanted::core(w),
            (false, Some(min)) => Wanted::cut_to(w, cap(c), min),
            (false, None) => Wanted::capped(w, cap(c)),
        })
        .collect();
    let shown = fit_widths(&wanted, width, 1);
    Fitted {
        columns: shown.columns.iter().map(|&i| columns[i].clone()).collect(),
        widths: shown.widths,
        hidden: shown.hidden,
    }
}

/// What one column of a table asks for: its content's width, the widest it may get (longer
/// values are cut), the narrowest it may be cut to where it does not fit, and whether it
/// always shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wanted {
    pub natural: u16,
    pub cap: u16,
    pub min: u16,
    pub core: bool,
}

impl Wanted {
    /// A column that always shows at its full width.
    pub fn core(natural: u16) -> Self {
        Wanted { natural, cap: natural, min: natural, core: true }
    }

    /// A column that shows while there is room, at most `cap` cells wide.
    pub fn capped(natural: u16, cap: u16) -> Self {
        Wanted { natural, cap, min: natural.min(cap), core: false }
    }

    /// [`capped`](Self::capped), and cut down to as few as `min` cells rather than left out.
    pub fn cut_to(natural: u16, cap: u16, min: u16) -> Self {
        Wanted { natural, cap, min: min.min(natural).min(cap), core: false }
    }
}

/// The columns shown (indices into what was asked for, in order) and their widths; `hidden`
/// counts the ones that did not fit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FittedWidths {
    pub columns: Vec<usize>,
    pub widths: Vec<u16>,
    pub hidden: usize,
}

impl FittedWidths {
    /// The table's column constraints, and its header's cells followed by the dimmed
    /// `+N hidden` note, in a column of its own, when columns were left out.
    pub fn layout<'a>(
        &self,
        mut header: Vec<ratatui::widgets::Cell<'a>>,
    ) -> (Vec<ratatui::layout::Constraint>, Vec<ratatui::widgets::Cell<'a>>) {
        use ratatui::layout::Constraint;
        let mut constraints: Vec<Constraint> = self.widths.iter().map(|&w| Constraint::Length(w)).collect();
        if self.hidden > 0 {
            let note = hidden_note(self.hidden);
            constraints.push(Constraint::Length(note.chars().count() as u16));
            header.push(ratatui::widgets::Cell::from(note).style(super::ui::dim()));
        }
        (constraints, header)
    }
}

/// Fits the columns into `width` cells with `gap` cells between columns: every core column
/// at its full width, then the longest prefix of the others that fits, leaving room for the
/// `+N hidden` note when some are left out; the first column left out is shown cut to the
/// room that is left, if that is at least its `min`. Where the core columns alone do not
/// fit, the longest prefix of them that does is shown, and nothing else.
pub fn fit_widths(wanted: &[Wanted], width: u16, gap: u16) -> FittedWidths {
    let (gap, width) = (u32::from(gap), u32::from(width));
    let (mut columns, mut widths, mut used) = (Vec::new(), Vec::new(), 0u32);
    // `used` counts each column with the gap after it.
    let mut rest = Vec::new();
    for (i, w) in wanted.iter().enumerate() {
        if w.core {
            columns.push(i);
            widths.push(w.natural);
            used += u32::from(w.natural) + gap;
        } else {
            rest.push((i, w.natural.min(w.cap), w.min));
        }
    }
    let note = |hidden: usize| if hidden > 0 { hidden_note(hidden).chars().count() as u32 + gap } else { 0 };
    if used > width + gap {
        // Not even the core fits: the longest prefix of it that does, whole (a value cut to
        // fit would read as another), beside the note; at least the first column.
        let total = columns.len() + rest.len();
        let mut kept = 0;
        let mut sum = 0u32;
        for (m, w) in widths.iter().enumerate() {
            sum += u32::from(*w) + gap;
            if m > 0 && sum + note(total - m - 1) > width + gap {
                break;
            }
            kept = m + 1;
        }
        columns.truncate(kept);
        widths.truncate(kept);
        return FittedWidths { columns, widths, hidden: total - kept };
    }
    let cost = |k: usize| -> u32 {
        let shown: u32 = rest[..k].iter().map(|(_, w, _)| u32::from(*w) + gap).sum();
        shown + note(rest.len() - k)
    };
    let k = (0..=rest.len()).rev().find(|&k| used + cost(k) <= width + gap).unwrap_or(0);
    // The next column, cut to what is left beside the note for the ones after it.
    let cut = rest.get(k).and_then(|&(i, w, min)| {
        let taken = used + cost(k) - note(rest.len() - k) + note(rest.len() - k - 1) + gap;
        let room = (width + gap).checked_sub(taken)?;
        (room >= u32::from(min)).then(|| (i, w.min(room as u16)))
    });
    let hidden = rest.len() - k - usize::from(cut.is_some());
    for (i, w, _) in rest.into_iter().take(k) {
        columns.push(i);
        widths.push(w);
    }
    if let Some((i, w)) = cut {
        columns.push(i);
        widths.push(w);
    }
    FittedWidths { columns, widths, hidden }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Vec<Column> {
        vec![
            Column::Id,
            Column::Status,
            Column::Steps,
            Column::Best,
            Column::Layer,
            Column::Key("interaction".into()),
            Column::Key("board".into()),
        ]
    }

    #[test]
    fn core_columns_keep_their_width_and_the_rest_drop_from_the_right() {
        let natural = [4, 11, 9, 15, 12, 30, 8];
        // Everything fits: configuration columns are capped, nothing hidden.
        let wide = fit(&columns(), &natural, 200);
        assert_eq!(wide.widths, vec![4, 11, 9, 15, 12, 16, 8]);
        assert_eq!(wide.hidden, 0);
        // 4+11+9+15 and four gaps = 43; layer takes 13 more, the note `+2 hidden` 10.
        let narrow = fit(&columns(), &natural, 66);
        assert_eq!(narrow.columns, columns()[..5].to_vec());
        assert_eq!(narrow.widths[..4], [4, 11, 9, 15]);
        assert_eq!(narrow.hidden, 2);
        // Narrower than the core: as much of the core as fits whole beside the note.
        let tiny = fit(&columns(), &natural, 30);
        assert_eq!((tiny.widths.clone(), tiny.hidden), (vec![4, 11], 5));
        let used: u16 = tiny.widths.iter().map(|w| w + 1).sum::<u16>() + hidden_note(5).len() as u16;
        assert!(used <= 30, "{tiny:?}");
        assert_eq!(fit(&columns(), &natural, 20).widths, vec![4], "at least the first");
    }

    #[test]
    fn a_free_text_column_is_cut_to_the_room_left_rather_than_hidden() {
        use Column::*;
        let with = |third: Column| vec![Id, Status, Steps, Best, Layer, third, Duration];
        let natural = [4, 11, 9, 15, 12, 40, 6];
        // The core and its gaps take 43 cells, the layer 13: at 80, neither the sweep whole
        // (28) nor more than the layer fits beside a note; the sweep is cut to the 14 cells
        // left beside `+1 hidden` (for the time).
        let cut = fit(&with(Sweep), &natural, 80);
        assert_eq!(cut.columns, with(Sweep)[..6].to_vec());
        assert_eq!((cut.widths[4..].to_vec(), cut.hidden), (vec![12, 14], 1));
        let used: u16 = cut.widths.iter().map(|w| w + 1).sum::<u16>() + hidden_note(1).len() as u16;
        assert_eq!(used, 80);
        // Tags too; a configuration value is never cut to fit.
        assert_eq!(fit(&with(Tags), &natural, 80).widths[5], 14);
        let key = fit(&with(Key("lr".into())), &natural, 75);
        assert_eq!((key.columns.len(), key.hidden), (5, 2));
        assert_eq!(fit(&with(Sweep), &natural, 75).widths[5], 9);
        // Fewer than 8 cells left: hidden, as before.
        let narrow = fit(&with(Sweep), &natural, 73);
        assert_eq!((narrow.columns.len(), narrow.hidden), (5, 2));
        // The last column cut needs no note.
        let last = fit(&[Id, Status, Steps, Best, Sweep], &[4, 11, 9, 15, 40], 60);
        assert_eq!((last.widths[4], last.hidden), (17, 0));
    }

    #[test]
    fn plugin_names_show_whole_where_configuration_values_are_cut() {
        // `energy-transformer` (18) beside a configuration value as long.
        let wide = fit(&columns(), &[4, 11, 9, 15, 18, 18, 8], 200);
        assert_eq!(wide.widths[4..6], [18, 16]);
    }

    #[test]
    fn wider_gaps_count_between_every_column_and_before_the_note() {
        let wanted = [Wanted::core(5), Wanted::core(3), Wanted::capped(20, 10), Wanted::capped(6, 10)];
        // 5 + 2 + 3 + 2 + 10 + 2 + 6 = 30.
        let all = fit_widths(&wanted, 30, 2);
        assert_eq!((all.columns, all.widths, all.hidden), (vec![0, 1, 2, 3], vec![5, 3, 10, 6], 0));
        // Narrower, the last goes and `+1 hidden` (9 cells) takes its place with a gap:
        // 5 + 2 + 3 + 2 + 10 + 2 + 9 = 33 would be needed, so at 29 only the core is left.
        let cut = fit_widths(&wanted, 29, 2);
        assert_eq!((cut.columns, cut.hidden), (vec![0, 1], 2));
        let cut = fit_widths(&wanted, 40, 2);
        assert_eq!((cut.columns, cut.hidden), (vec![0, 1, 2, 3], 0));
        let wide_last = [Wanted::core(5), Wanted::core(3), Wanted::capped(20, 10), Wanted::capped(16, 16)];
        let cut = fit_widths(&wide_last, 33, 2);
        assert_eq!((cut.columns, cut.widths, cut.hidden), (vec![0, 1, 2], vec![5, 3, 10], 1));
        let cut = fit_widths(&wide_last, 32, 2);
        assert_eq!((cut.columns, cut.hidden), (vec![0, 1], 2));
    }

    #[test]
    fn the_note_gets_room_when_columns_are_dropped() {
        let natural = [4, 11, 9, 15, 12, 30, 8];
        // From the core's 42 cells and the note's 10 up; below that the core alone overflows.
        for width in 52..120u16 {
            let f = fit(&columns(), &natural, width);
            let used: u32 = f.widths.iter().map(|w| u32::from(*w) + 1).sum::<u32>() - 1;
            let note = if f.hidden > 0 { hidden_note(f.hidden).len() as u32 + 1 } else { 0 };
            assert!(used + note <= u32::from(width), "width {width}: {f:?}");
        }
    }
}
