//! What a screen is: it declares its commands once (they dispatch its keys and fill the `?`
//! overlay and the footer), runs their actions on the state, and draws itself from the state
//! by shared reference into the areas laid out before the frame.

use super::app::App;
use super::keys::{Action, Command};
use super::layout::Areas;
use ratatui::layout::Rect;
use ratatui::Frame;

/// One screen of the workbench.
pub trait Component: Sync {
    /// Every command of the screen, in the order the help lists them.
    fn commands(&self) -> &'static [Command];

    /// Runs one of this screen's actions (or a mouse wheel's `Down(1)` / `Up(1)`).
    fn act(&self, app: &mut App, action: Action);

    /// Draws the screen into `area` (the body between the tab bar and the footer).
    fn draw(&self, frame: &mut Frame, area: Rect, app: &App, areas: &Areas);
}
