//! One module per screen, each with its commands, its actions, its own state and its
//! drawing; plus the `?` overlay ([`help`]) and the dialogs ([`modal`]).

pub mod ablation;
pub mod columns;
pub mod compare;
pub mod differences;
pub mod heatmap;
pub mod help;
pub mod launch;
pub mod live;
pub mod modal;
pub mod plugins;
pub mod runs;
pub mod system_panel;

use super::app::Screen;
use super::component::Component;

/// The component that is `screen`.
pub fn component(screen: Screen) -> &'static dyn Component {
    match screen {
        Screen::Runs => &runs::Runs,
        Screen::Launch => &launch::Launch,
        Screen::Live => &live::Live,
        Screen::Compare => &compare::Compare,
        Screen::Ablation => &ablation::Ablation,
        Screen::Plugins => &plugins::Plugins,
    }
}
