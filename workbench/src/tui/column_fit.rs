//! Which columns of the runs table fit the terminal, and how wide each is. The core columns
//! (id, status, progress, best metric) get their full width first, so a number is never cut;
//! configuration columns share what is left and are dropped from the right, the table then
//! saying how many it left out.

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
        _ => 16,
    }
}

/// `+3 hidden`: what the header says when columns did not fit.
pub fn hidden_note(n: usize) -> String {
    format!("+{n} hidden")
}

/// Fits `columns` (core ones first), whose content is `natural` cells wide, into `width`
/// cells with one cell between columns.
pub fn fit(columns: &[Column], natural: &[u16], width: u16) -> Fitted {
    let (mut shown, mut widths, mut used) = (Vec::new(), Vec::new(), 0u32);
    // `used` counts each column with the gap after it.
    let mut rest = Vec::new();
    for (c, w) in columns.iter().zip(natural) {
        if c.is_core() {
            shown.push(c.clone());
            widths.push(*w);
            used += u32::from(*w) + 1;
        } else {
            rest.push((c.clone(), (*w).min(cap(c))));
        }
    }
    // The longest prefix of the rest that fits, leaving room for the note when cut short.
    let cost = |k: usize| -> u32 {
        let columns: u32 = rest[..k].iter().map(|(_, w)| u32::from(*w) + 1).sum();
        let note = if k < rest.len() { hidden_note(rest.len() - k).chars().count() as u32 + 1 } else { 0 };
        columns + note
    };
    let k = (0..=rest.len()).rev().find(|&k| used + cost(k) <= u32::from(width) + 1).unwrap_or(0);
    let hidden = rest.len() - k;
    for (c, w) in rest.into_iter().take(k) {
        shown.push(c);
        widths.push(w);
    }
    Fitted { columns: shown, widths, hidden }
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
        // Narrower than the core: the core still gets its full width, everything else goes.
        let tiny = fit(&columns(), &natural, 20);
        assert_eq!(tiny.widths, vec![4, 11, 9, 15]);
        assert_eq!(tiny.hidden, 3);
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
