//! How many nominalConcurrencyShares to move to a priority level short of seats, and from which levels.
//!
//! Moving shares keeps their sum, so every share moved is worth the same seats on both sides: NominalCL =
//! ceil(ServerCL × shares / Σ shares) ([`crate::limits`]). A move takes no more than a donor has and leaves each
//! donor what its own load needs, so it never gives more seats than the server has; and a move too small to matter
//! is not proposed at all.
//!
//! From 1.26 levels lend seats they do not use and borrow what others lend (kube-apiserver's
//! `apf_controller.go`, the borrowing its CurrentCL comes from): a level short of seats borrows already, and much of
//! it from the levels a move would take shares from. A share moved from a level that lends carries away its part of
//! what that level may lend (lendablePercent of it), so the level short of seats gains its worth less what it
//! borrowed of it: a move from a lending level is worth fewer seats than its shares.

/// A level that could give shares.
#[derive(Debug, Clone, PartialEq)]
pub struct Donor {
    pub name: String,
    /// Its nominalConcurrencyShares.
    pub shares: u32,
    /// The seats its own load needs: what a move must leave it.
    pub needs_seats: f64,
    /// The seats of its nominal limit it lends now (NominalCL − CurrentCL where it is below, 1.26+; else 0).
    pub lent_seats: f64,
    /// The share of its nominal limit it may lend (lendablePercent / 100).
    pub lendable_share: f64,
}

impl Donor {
    /// The shares it can give at a worth of `per_share` seats: all but what its load needs, and never its last one
    /// (a level of 0 shares has no seats of its own).
    pub fn spare_shares(&self, per_share: f64) -> u32 {
        if !(per_share > 0.0 && per_share.is_finite() && self.needs_seats.is_finite()) {
            return 0;
        }
        let kept = (self.needs_seats.max(0.0) / per_share).ceil().max(1.0);
        // `kept` is at least 1; a float beyond u32 saturates, which keeps every share.
        self.shares.saturating_sub(kept as u32)
    }

    /// What it stops lending when it gives `k` of its shares worth `per_share` seats each: it may lend
    /// `lendable_share` of what its shares are left worth, and lends what it lends now as far as that goes.
    pub fn lending_lost(&self, k: u32, per_share: f64) -> f64 {
        let left = f64::from(self.shares.saturating_sub(k)) * per_share;
        let share = self.lendable_share.clamp(0.0, 1.0);
        let lent = if self.lent_seats.is_finite() {
            self.lent_seats.max(0.0)
        } else {
            0.0
        };
        (lent - left * share).max(0.0)
    }
}

/// What moving shares can do for a level.
#[derive(Debug, Clone, PartialEq)]
pub enum ShareMove {
    /// Move these shares from these levels (the one with most to spare first, [`MAX_DONORS`] at most): the level
    /// gains about `seats` of limit, the shares' `nominal_seats` less what it borrowed of them already; `short` is
    /// what it would still lack (0 when the move covers the need); `spare` is what every donor spares together (in
    /// nominal seats), more than `nominal_seats` where levels beyond the move's have some too.
    Move {
        from: Vec<(String, u32)>,
        seats: f64,
        nominal_seats: f64,
        short: f64,
        spare: f64,
    },
    /// The level lacks `seats` (0 or fewer: none), fewer than a move worth making ([`smallest_move`]).
    TooSmall { seats: f64 },
    /// The other levels cannot spare a move worth making: `spare` seats in all beyond their own loads.
    NoSpare { spare: f64 },
}

/// Donors a move takes from, at most: a change a person can make in one go.
pub const MAX_DONORS: usize = 3;

/// The fewest seats worth a move to a level of `nominal` seats: a tenth of it, and 3 at least. A move of a seat or
/// two changes nothing anyone would notice, and a wide request (a LIST takes up to 10 seats) would not fit them.
pub fn smallest_move(nominal: f64) -> f64 {
    (nominal.max(0.0) * 0.1).max(3.0)
}

/// The move that gives a level of `nominal` seats, which borrows `borrowed` beyond them now, the `needed` more seats
/// of limit it lacks, a share worth `per_share` seats. What the donors stop lending is taken from what it borrows
/// (it is the level short of seats: the borrower), never more than that.
pub fn plan(
    needed: f64,
    nominal: f64,
    borrowed: f64,
    per_share: f64,
    donors: &[Donor],
) -> ShareMove {
    if !needed.is_finite() || needed < smallest_move(nominal) {
        return ShareMove::TooSmall {
            seats: if needed.is_finite() { needed } else { 0.0 },
        };
    }
    let mut spare: Vec<(&Donor, u32)> = donors
        .iter()
        .map(|d| (d, d.spare_shares(per_share)))
        .filter(|(_, s)| *s > 0)
        .collect();
    // Most to spare first; by name among equals, so the proposal does not change from round to round.
    spare.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.name.cmp(&b.0.name)));
    // A fold from +0: an empty float sum is -0, which a sentence would print as "-0".
    let all_spare = spare.iter().fold(0.0, |a, (_, s)| a + f64::from(*s)) * per_share;
    // What the donors stop lending comes out of what the level borrows, and no more than it.
    let mut borrowing = if borrowed.is_finite() {
        borrowed.max(0.0)
    } else {
        0.0
    };
    let (mut gained, mut moved) = (0.0, 0u32);
    let mut from = Vec::new();
    for (donor, s) in spare.into_iter().take(MAX_DONORS) {
        let wanted = needed - gained;
        if wanted <= 0.0 {
            break;
        }
        let gain =
            |k: u32| f64::from(k) * per_share - donor.lending_lost(k, per_share).min(borrowing);
        // Whole shares, the fewest that give what is wanted (the gain grows with every share: a share carries
        // away at most its own worth of lending), else all it spares.
        let take = if gain(s) < wanted {
            s
        } else {
            let (mut low, mut high) = (1, s);
            while low < high {
                let mid = low + (high - low) / 2;
                if gain(mid) >= wanted {
                    high = mid;
                } else {
                    low = mid + 1;
                }
            }
            low
        };
        let lost = donor.lending_lost(take, per_share).min(borrowing);
        borrowing -= lost;
        gained += f64::from(take) * per_share - lost;
        moved += take;
        from.push((donor.name.clone(), take));
    }
    if moved == 0 || gained < smallest_move(nominal) {
        return ShareMove::NoSpare { spare: all_spare };
    }
    ShareMove::Move {
        from,
        seats: gained,
        nominal_seats: f64::from(moved) * per_share,
        short: (needed - gained).max(0.0),
        spare: all_spare,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn donor(name: &str, shares: u32, needs_seats: f64) -> Donor {
        Donor {
            name: name.into(),
            shares,
            needs_seats,
            lent_seats: 0.0,
            lendable_share: 0.0,
        }
    }

    /// Default levels at ServerCL 600: 1 share ≈ 2.45 seats.
    const PER_SHARE: f64 = 2.45;

    #[test]
    fn a_move_covers_the_need_from_the_level_with_most_to_spare() {
        let donors = [
            donor("workload-low", 100, 50.0),
            donor("node-high", 40, 10.0),
        ];
        // 20 seats: 9 shares (22.05 seats), all from workload-low, which keeps 21 of its 100 shares' worth.
        let m = plan(20.0, 49.0, 0.0, PER_SHARE, &donors);
        let ShareMove::Move {
            from,
            seats,
            short,
            spare,
            ..
        } = m
        else {
            panic!("{m:?}")
        };
        assert_eq!(from, vec![("workload-low".to_string(), 9)]);
        assert!((seats - 22.05).abs() < 1e-9);
        assert_eq!(short, 0.0);
        // workload-low keeps 21 of its 100 shares, node-high 5 of its 40.
        assert!((spare - (79.0 + 35.0) * PER_SHARE).abs() < 1e-9);
    }

    #[test]
    fn a_donor_keeps_what_its_own_load_needs_and_its_last_share() {
        // node-high holds 40 shares (98 seats) and its load needs 73 of them: 10 shares spare, not 3309.
        let d = donor("node-high", 40, 73.0);
        assert_eq!(d.spare_shares(PER_SHARE), 10);
        // Idle: all but one.
        assert_eq!(donor("catch-all", 5, 0.0).spare_shares(PER_SHARE), 4);
        // Busier than its shares: nothing.
        assert_eq!(donor("x", 10, 500.0).spare_shares(PER_SHARE), 0);
        // Nonsense worth or need: nothing.
        assert_eq!(d.spare_shares(0.0), 0);
        assert_eq!(d.spare_shares(f64::NAN), 0);
        assert_eq!(donor("x", 10, f64::INFINITY).spare_shares(PER_SHARE), 0);
        assert_eq!(
            donor("x", u32::MAX, 0.0).spare_shares(PER_SHARE),
            u32::MAX - 1
        );
    }

    #[test]
    fn a_need_beyond_every_donor_is_bounded_and_says_what_is_left() {
        // The report that proposed "3309 shares from node-high ... about 8107 more seats": a demand of thousands of
        // seats on a 600-seat server. The move takes what the donors can spare, never more seats than they hold.
        let donors = [
            donor("node-high", 40, 73.0),
            donor("workload-high", 40, 20.0),
            donor("global-default", 20, 5.0),
            donor("catch-all", 5, 0.0),
        ];
        let m = plan(8107.0, 245.0, 0.0, PER_SHARE, &donors);
        let ShareMove::Move {
            from,
            seats,
            short,
            spare,
            ..
        } = m
        else {
            panic!("{m:?}")
        };
        // Three donors at most, most to spare first: 31 + 17 + 10 shares; catch-all's 4 are left, and said.
        assert_eq!(
            from,
            vec![
                ("workload-high".to_string(), 31),
                ("global-default".to_string(), 17),
                ("node-high".to_string(), 10),
            ]
        );
        let total_shares: u32 = donors.iter().map(|d| d.shares).sum();
        assert!(seats <= f64::from(total_shares) * PER_SHARE);
        assert!((seats - 58.0 * PER_SHARE).abs() < 1e-9);
        assert!((short - (8107.0 - seats)).abs() < 1e-9);
        assert!((spare - 62.0 * PER_SHARE).abs() < 1e-9);
    }

    #[test]
    fn a_move_too_small_to_matter_is_not_proposed() {
        let donors = [donor("node-high", 40, 10.0)];
        // "move 1 shares ... about 2 more seats" to a 245-seat level: under a tenth of it.
        assert_eq!(
            plan(2.0, 245.0, 0.0, PER_SHARE, &donors),
            ShareMove::TooSmall { seats: 2.0 }
        );
        assert_eq!(
            plan(24.0, 245.0, 0.0, PER_SHARE, &donors),
            ShareMove::TooSmall { seats: 24.0 }
        );
        assert!(matches!(
            plan(24.5, 245.0, 0.0, PER_SHARE, &donors),
            ShareMove::Move { .. }
        ));
        // A small level: 3 seats at least.
        assert!(matches!(
            plan(2.9, 13.0, 0.0, PER_SHARE, &donors),
            ShareMove::TooSmall { .. }
        ));
        assert!(matches!(
            plan(3.0, 13.0, 0.0, PER_SHARE, &donors),
            ShareMove::Move { .. }
        ));
        // No need at all, or a need that is not a number.
        assert_eq!(
            plan(-40.0, 245.0, 0.0, PER_SHARE, &donors),
            ShareMove::TooSmall { seats: -40.0 }
        );
        assert_eq!(
            plan(f64::NAN, 245.0, 0.0, PER_SHARE, &donors),
            ShareMove::TooSmall { seats: 0.0 }
        );
    }

    #[test]
    fn spare_too_small_to_matter_is_no_move() {
        // The donors can give 2 shares (4.9 seats) to a level that needs 50 more of 245: not worth a move.
        let donors = [donor("a", 3, 0.0), donor("b", 2, 4.0)];
        let m = plan(50.0, 245.0, 0.0, PER_SHARE, &donors);
        let ShareMove::NoSpare { spare } = m else {
            panic!("{m:?}")
        };
        assert!((spare - 2.0 * PER_SHARE).abs() < 1e-9);
        let none = plan(50.0, 245.0, 0.0, PER_SHARE, &[]);
        assert_eq!(none, ShareMove::NoSpare { spare: 0.0 });
        // +0, not -0: it is printed.
        assert!(matches!(none, ShareMove::NoSpare { spare } if spare.is_sign_positive()));
    }

    #[test]
    fn equal_donors_are_taken_by_name() {
        let donors = [donor("b", 11, 0.0), donor("a", 11, 0.0)];
        let ShareMove::Move { from, .. } = plan(10.0, 49.0, 0.0, PER_SHARE, &donors) else {
            panic!()
        };
        assert_eq!(from, vec![("a".to_string(), 5)]);
    }

    /// The crowd's move (`config/scenarios/crowd.yaml`): workload-low borrows 118 seats, most of them lent by the
    /// idle levels it takes shares from. 10 shares of global-default (lends 25 of 49, may lend half) are worth 24.5
    /// seats but carry away 12.75 of its lending; node-high's 10 (lends 25 of 98, may lend a quarter) carry away
    /// 6.6, system's 9 (lends 24 of 74, a third) 7.2: about 45 seats of limit, as the replay predicted (362 → 406)
    /// and the replica then measured (408), not the 71 the shares are worth.
    #[test]
    fn a_share_from_a_lending_level_is_worth_less_than_its_seats() {
        let lending = |name: &str, shares: u32, needs: f64, lent: f64, share: f64| Donor {
            lent_seats: lent,
            lendable_share: share,
            ..donor(name, shares, needs)
        };
        let donors = [
            lending("global-default", 20, 8.0, 25.0, 0.5),
            lending("node-high", 40, 73.0, 25.0, 0.25),
            lending("system", 30, 50.0, 24.0, 0.33),
        ];
        let d = &donors[0];
        assert!((d.lending_lost(10, PER_SHARE) - (25.0 - 10.0 * PER_SHARE * 0.5)).abs() < 1e-9);
        // Lending nothing, it loses nothing; giving all, all it lent.
        assert_eq!(donor("x", 20, 0.0).lending_lost(10, PER_SHARE), 0.0);
        assert_eq!(d.lending_lost(20, PER_SHARE), 25.0);
        let ShareMove::Move {
            from,
            seats,
            nominal_seats,
            short,
            ..
        } = plan(200.0, 245.0, 118.0, PER_SHARE, &donors)
        else {
            panic!()
        };
        assert_eq!(
            from,
            vec![
                ("global-default".to_string(), 16),
                ("node-high".to_string(), 10),
                ("system".to_string(), 9),
            ]
        );
        assert!((nominal_seats - 35.0 * PER_SHARE).abs() < 1e-9);
        let lost = d.lending_lost(16, PER_SHARE)
            + donors[1].lending_lost(10, PER_SHARE)
            + donors[2].lending_lost(9, PER_SHARE);
        assert!((seats - (nominal_seats - lost)).abs() < 1e-9, "{seats}");
        assert!((short - (200.0 - seats)).abs() < 1e-9);
        // The fewest shares that cover a need, lending counted: 15 seats from global-default take 13 shares
        // (31.85 seats, less the 16.4 it no longer lends: 15.4), where 12 give 14.2.
        let ShareMove::Move { from, seats, .. } = plan(15.0, 49.0, 118.0, PER_SHARE, &donors[..1])
        else {
            panic!()
        };
        assert_eq!(from, vec![("global-default".to_string(), 13)]);
        assert!((seats - (13.0 * PER_SHARE - d.lending_lost(13, PER_SHARE))).abs() < 1e-9);
        assert!(seats >= 15.0 && 12.0 * PER_SHARE - d.lending_lost(12, PER_SHARE) < 15.0);
        // What it stops lending comes out of what the level borrows, no more: borrowing nothing, it loses nothing.
        let ShareMove::Move {
            seats,
            nominal_seats,
            ..
        } = plan(20.0, 49.0, 0.0, PER_SHARE, &donors[..1])
        else {
            panic!()
        };
        assert_eq!(seats, nominal_seats);
    }
}
