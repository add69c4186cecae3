//! Loading `puzzle,solution` CSV files, the layout of the common public Sudoku datasets.

use super::{solution_problem, Grid, Puzzle};
use std::io::BufRead;
use std::path::Path;

/// What went wrong while loading a Sudoku CSV file. Every message names the source and, for
/// problems with the content, the 1-based line number.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// The file does not exist.
    #[error(
        "Sudoku file `{path}` does not exist; check the path (relative paths are resolved from the current directory)"
    )]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The file could not be opened or read.
    #[error("could not read Sudoku file `{source_name}`{}: {error}; check that it is a readable file", at_line(.line))]
    Io {
        /// The path or source name.
        source_name: String,
        /// The line being read when reading failed, if any.
        line: Option<usize>,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
    /// A line does not have a puzzle field and a solution field.
    #[error("{source_name}, line {line}: expected at least two comma-separated fields `puzzle,solution` but found {found}; each line needs the 81-character puzzle, a comma, then the 81-character solution")]
    FieldCount {
        /// The path or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The number of fields found.
        found: usize,
    },
    /// The puzzle or solution field does not have 81 characters.
    #[error("{source_name}, line {line}: the {field} has {found} characters but must have exactly 81, one per cell in row-major order")]
    Length {
        /// The path or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// `"puzzle"` or `"solution"`.
        field: &'static str,
        /// The number of characters found.
        found: usize,
    },
    /// A field holds a character that is not a digit (or a blank marker, in a puzzle).
    #[error(
        "{source_name}, line {line}, column {column}: the {field} contains {found:?}, which is not allowed; {allowed}"
    )]
    BadChar {
        /// The path or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// 1-based character column within the line.
        column: usize,
        /// `"puzzle"` or `"solution"`.
        field: &'static str,
        /// The offending character.
        found: char,
        /// Which characters are allowed in this field.
        allowed: &'static str,
    },
    /// The solution is not a valid completed grid, or it contradicts a clue of the puzzle.
    #[error("{source_name}, line {line}: {reason}; fix or remove this line")]
    InvalidSolution {
        /// The path or source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong, e.g. "row 3 of the solution contains 5 twice".
        reason: String,
    },
    /// The source holds no puzzles at all.
    #[error("`{source_name}` contains no puzzles; expected lines of the form `puzzle,solution` with two 81-character grids each")]
    Empty {
        /// The path or source name.
        source_name: String,
    },
}

fn at_line(line: &Option<usize>) -> String {
    match line {
        Some(n) => format!(" at line {n}"),
        None => String::new(),
    }
}

/// Loads every puzzle of the CSV file at `path` (see [`parse_csv`] for the format).
pub fn load_csv(path: &Path) -> Result<Vec<Puzzle>, CsvError> {
    let name = path.display().to_string();
    let (file, _) = crate::files::open_regular(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            CsvError::NotFound { path: name.clone() }
        } else {
            CsvError::Io { source_name: name.clone(), line: None, error }
        }
    })?;
    parse_csv(std::io::BufReader::new(file), &name)
}

/// The longest line read (a line holds two grids of 81 characters and perhaps a rating).
const MAX_LINE: u64 = 64 * 1024;

/// Parses `puzzle,solution` lines; `source` names the input in error messages.
///
/// Each line holds two 81-character grids in row-major order. Puzzles use the digits 1-9 and
/// `0` or `.` for blanks; solutions use 1-9 only and must be valid completed grids that agree
/// with every clue. Columns after the first two (such as a difficulty rating) are ignored,
/// blank lines are skipped, fields may be surrounded by spaces or double quotes, and `\r\n`
/// line endings and a UTF-8 byte-order mark are accepted. A header line (such as
/// `quizzes,solutions`) is skipped if it is the first non-blank line and its first field is
/// not a grid: not 81 characters long and not made only of digits and dots (a short line of
/// digits is reported as a bad grid rather than silently skipped).
///
/// The uniqueness of each puzzle is not checked (that would dominate the loading time of
/// large files); use [`super::count_solutions`] where it matters.
pub fn parse_csv<R: BufRead>(mut reader: R, source: &str) -> Result<Vec<Puzzle>, CsvError> {
    let mut puzzles = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0;
    let mut seen_content = false;
    loop {
        buf.clear();
        line_no += 1;
        // A line is read up to MAX_LINE bytes, so a file without line breaks cannot fill memory.
        let n = std::io::Read::take(&mut reader, MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|error| CsvError::Io { source_name: source.to_string(), line: Some(line_no), error })?;
        if n == 0 {
            break;
        }
        if n as u64 > MAX_LINE {
            let error = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the line is longer than {MAX_LINE} bytes, where a line holds two 81-character grids"),
            );
            return Err(CsvError::Io { source_name: source.to_string(), line: Some(line_no), error });
        }
        // Invalid UTF-8 becomes U+FFFD and is then reported as a bad character.
        let text = String::from_utf8_lossy(&buf);
        let mut line: &str = text.trim_end_matches(['\n', '\r']);
        if line_no == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.trim().is_empty() {
            continue;
        }
        let first_content = !seen_content;
        seen_content = true;
        if first_content && is_header(line) {
            continue;
        }
        puzzles.push(parse_line(line, line_no, source)?);
    }
    if puzzles.is_empty() {
        return Err(CsvError::Empty { source_name: source.to_string() });
    }
    Ok(puzzles)
}

fn is_header(line: &str) -> bool {
    let first = trim_field(line.split(',').next().unwrap_or("")).0;
    first.chars().count() != 81 && !first.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Strips surrounding whitespace and one pair of double quotes; also returns how many
/// characters were removed from the front, to report accurate columns.
fn trim_field(field: &str) -> (&str, usize) {
    let start = field.trim_start();
    let mut skipped = field[..field.len() - start.len()].chars().count();
    let mut f = start.trim_end();
    if f.len() >= 2 && f.starts_with('"') && f.ends_with('"') {
        f = f[1..f.len() - 1].trim();
        skipped += 1 + start[1..].chars().count() - start[1..].trim_start().chars().count();
    }
    (f, skipped)
}

fn parse_line(line: &str, line_no: usize, source: &str) -> Result<Puzzle, CsvError> {
    let fields: Vec<&str> = line.split(',').collect();
    if fields.len() < 2 {
        return Err(CsvError::FieldCount { source_name: source.to_string(), line: line_no, found: fields.len() });
    }
    let mut column = 1; // 1-based column where the current raw field starts
    let mut grids = [[0u8; 81]; 2];
    for (k, field_name) in ["puzzle", "solution"].into_iter().enumerate() {
        let raw = fields[k];
        let (text, skipped) = trim_field(raw);
        grids[k] = parse_grid(text, field_name, column + skipped, line_no, source)?;
        column += raw.chars().count() + 1; // the field and its comma
    }
    let [puzzle, solution] = grids;
    if let Some(reason) = solution_problem(&puzzle, &solution) {
        return Err(CsvError::InvalidSolution { source_name: source.to_string(), line: line_no, reason });
    }
    Ok(Puzzle { puzzle, solution })
}

fn parse_grid(
    text: &str,
    field: &'static str,
    first_column: usize,
    line: usize,
    source: &str,
) -> Result<Grid, CsvError> {
    let is_puzzle = field == "puzzle";
    let mut grid = [0u8; 81];
    let mut len = 0;
    for (k, ch) in text.chars().enumerate() {
        let value = match ch {
            '1'..='9' => ch as u8 - b'0',
            '0' | '.' if is_puzzle => 0,
            _ => {
                return Err(CsvError::BadChar {
                    source_name: source.to_string(),
                    line,
                    column: first_column + k,
                    field,
                    found: ch,
                    allowed: if is_puzzle {
                        "use the digits 1-9, and 0 or . for blanks"
                    } else {
                        "a solution must be complete, using only the digits 1-9"
                    },
                })
            }
        };
        if k < 81 {
            grid[k] = value;
        }
        len = k + 1;
    }
    if len != 81 {
        return Err(CsvError::Length { source_name: source.to_string(), line, field, found: len });
    }
    Ok(grid)
}
