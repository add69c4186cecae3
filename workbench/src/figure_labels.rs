//! Placing the labels drawn at the end of curves (`train loss`, `eval loss`) so they do not
//! cover each other when curves end at the same point.

/// A label to place: the pixel its bottom-right corner is anchored at, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndLabel {
    pub anchor: (i32, i32),
    pub size: (u32, u32),
}

fn overlaps(a: (i32, i32), asz: (u32, u32), b: (i32, i32), bsz: (u32, u32)) -> bool {
    // Boxes extend left and up from their anchors.
    let (ax0, ay0, bx0, by0) = (a.0 - asz.0 as i32, a.1 - asz.1 as i32, b.0 - bsz.0 as i32, b.1 - bsz.1 as i32);
    ax0 < b.0 && bx0 < a.0 && ay0 < b.1 && by0 < a.1
}

/// Anchors for `labels`, in order: each keeps its own unless it would cover one placed before,
/// then it moves up a line at a time (down when that leaves the plot, whose top is `top`).
pub fn place(labels: &[EndLabel], top: i32) -> Vec<(i32, i32)> {
    // Each placed label's anchor and size.
    type Placed = ((i32, i32), (u32, u32));
    let mut placed: Vec<Placed> = Vec::new();
    for l in labels {
        let step = l.size.1 as i32 + 2;
        let free = |at: (i32, i32), placed: &[Placed]| placed.iter().all(|(p, s)| !overlaps(at, l.size, *p, *s));
        let mut at = l.anchor;
        // Up first, then down: at most as many moves as labels already placed, and one more.
        let ups = (0..=placed.len() as i32).map(|k| (l.anchor.0, l.anchor.1 - k * step));
        let downs = (1..=placed.len() as i32 + 1).map(|k| (l.anchor.0, l.anchor.1 + k * step));
        if let Some(found) = ups.filter(|p| p.1 - l.size.1 as i32 >= top).chain(downs).find(|p| free(*p, &placed)) {
            at = found;
        }
        placed.push((at, l.size));
    }
    placed.into_iter().map(|(at, _)| at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_of_curves_ending_at_the_same_point_do_not_cover_each_other() {
        let train = EndLabel { anchor: (500, 300), size: (60, 14) };
        let eval = EndLabel { anchor: (500, 300), size: (58, 14) };
        let at = place(&[train, eval], 0);
        assert_eq!(at[0], (500, 300), "the first label stays at its curve's end");
        assert_ne!(at[0], at[1]);
        assert!(!overlaps(at[0], train.size, at[1], eval.size), "{at:?}");
        // Near the top of the plot the second label goes below instead.
        let at = place(&[EndLabel { anchor: (500, 20), ..train }, EndLabel { anchor: (500, 20), ..eval }], 0);
        assert!(at[1].1 > 20 && !overlaps(at[0], train.size, at[1], eval.size), "{at:?}");
        // Labels far apart keep their places.
        let far = EndLabel { anchor: (200, 100), size: (58, 14) };
        assert_eq!(place(&[train, far], 0), vec![(500, 300), (200, 100)]);
    }
}
