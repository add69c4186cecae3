//! The commands' plain-text tables: each column as wide as its widest cell (a layer named
//! `energy-transformer` widens its column instead of pushing the rest of its row out of line),
//! two spaces between columns, numbers right-aligned, no blanks at the ends of lines.

use comfy_table::{presets::NOTHING, CellAlignment, ContentArrangement, Table};

pub struct TextTable {
    table: Table,
}

impl TextTable {
    /// A table with these column titles; every column left-aligned until [`Self::right`].
    pub fn new<S: ToString>(titles: impl IntoIterator<Item = S>) -> Self {
        let mut table = Table::new();
        // Never wrapped to the terminal's width: a table piped to a file stays one line a row.
        table.load_preset(NOTHING).set_content_arrangement(ContentArrangement::Disabled);
        table.set_header(titles.into_iter().map(|t| t.to_string()).collect::<Vec<_>>());
        for column in table.column_iter_mut() {
            column.set_padding((0, 2));
        }
        TextTable { table }
    }

    /// Right-aligns the columns at these positions (numbers, so that their digits line up).
    pub fn right(mut self, columns: impl IntoIterator<Item = usize>) -> Self {
        for i in columns {
            if let Some(column) = self.table.column_mut(i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        self
    }

    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.table.add_row(cells.into_iter().map(|c| c.to_string()).collect::<Vec<_>>());
    }

    /// The title line, then a line per row.
    pub fn lines(&self) -> Vec<String> {
        self.table.lines().map(|line| line.trim_end().to_string()).collect()
    }

    pub fn print(&self) {
        self.print_after("");
    }

    /// Prints the lines, the first after `first` and the others after as many blanks.
    pub fn print_after(&self, first: &str) {
        let indent = " ".repeat(first.chars().count());
        for (i, line) in self.lines().iter().enumerate() {
            println!("{}{line}", if i == 0 { first } else { &indent });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_widen_to_their_longest_cell_and_numbers_align_right() {
        let mut table = TextTable::new(["id", "layer", "last eval"]).right([0]);
        table.row(["1", "energy-transformer", "top1 0.098"]);
        table.row(["123", "crate", "nll 2.4"]);
        assert_eq!(
            table.lines(),
            [
                " id  layer               last eval",
                "  1  energy-transformer  top1 0.098",
                "123  crate               nll 2.4",
            ]
        );
    }
}
