//! The state as an act opened the store, kept to tell at its end whether the act changed
//! anything: an act that changed nothing writes nothing (`Store::save_unless`).

use super::{List, State};

/// The state an act opened the store with, as much of it as tells at the act's end whether it
/// changed anything ([`State::unchanged_since`]): every field but the declaration, which only
/// another declaration replaces, and the lists, whose changes are counted rather than copied (a
/// copy of 10,000 records cost more than the save it spared).
pub struct Opened {
    rest: State,
    edits: [u64; 3],
}

impl Opened {
    /// The briefing the store held.
    pub fn briefing(&self) -> Option<&crate::briefing::Briefing> {
        self.rest.briefing.as_ref()
    }
}

impl State {
    /// What [`State::unchanged_since`] compares with, for an act that leaves the declaration as
    /// it is.
    pub fn opened(&self) -> Opened {
        Opened {
            rest: State {
                version: self.version,
                node: self.node.clone(),
                mode: self.mode,
                taken: self.taken.clone(),
                settings: self.settings.clone(),
                declaration: None,
                source: self.source,
                owned: List::default(),
                held: List::default(),
                originals: List::default(),
                pending: self.pending.clone(),
                briefing: self.briefing.clone(),
                firewall_generation: self.firewall_generation,
                firewall_legacy: self.firewall_legacy.clone(),
                firewall_guard: self.firewall_guard.clone(),
                boot: self.boot.clone(),
                flip: self.flip.clone(),
            },
            edits: self.edits(),
        }
    }

    /// Whether the state is still `opened`, its declaration (never replaced meanwhile, which
    /// the caller knows) aside.
    pub fn unchanged_since(&self, opened: &Opened) -> bool {
        let State {
            version,
            node,
            mode,
            taken,
            settings,
            declaration: _,
            source,
            owned: _,
            held: _,
            originals: _,
            pending,
            briefing,
            firewall_generation,
            firewall_legacy,
            firewall_guard,
            boot,
            flip,
        } = self;
        let was = &opened.rest;
        self.edits() == opened.edits
            && *version == was.version
            && *node == was.node
            && *mode == was.mode
            && *taken == was.taken
            && *settings == was.settings
            && *source == was.source
            && *pending == was.pending
            && *briefing == was.briefing
            && *firewall_generation == was.firewall_generation
            && *firewall_legacy == was.firewall_legacy
            && *firewall_guard == was.firewall_guard
            && *boot == was.boot
            && *flip == was.flip
    }

    fn edits(&self) -> [u64; 3] {
        [
            self.owned.edits(),
            self.held.edits(),
            self.originals.edits(),
        ]
    }
}
