//! Shuffle sharding, as kube-apiserver's APF puts a flow in a priority level's queues: the flow's hash, from its flow
//! schema and its distinguisher (k8s.io/apiserver `pkg/util/flowcontrol/apf_controller.go`, `hashFlowID`), deals it a
//! hand of the level's queues (`pkg/util/shufflesharding`, `Dealer`), and each request of the flow joins the
//! shortest queue of that hand. Two flows whose hands overlap can share a queue, and with it a share of the seats.
//! The simulator's queues come from here (issue 51), so that a flow lands where kube-apiserver puts it.
use sha2::{Digest, Sha256};

/// The most bits of a hash a deal may use: with all 64 the last card would lean 2:3 between the deck's halves; 60
/// keeps it to 32:33 (`shufflesharding.MaxHashBits`).
pub const MAX_HASH_BITS: u32 = 60;

/// The largest deck a dealer takes (`1 << 26`), and the largest hand kube-apiserver's validation allows (`handSize`
/// at most 15, whose remainders the deal keeps on the stack).
pub const MAX_DECK: u64 = 1 << 26;
pub const MAX_HAND: u32 = 15;

/// A flow's hash, as kube-apiserver computes it: the first 8 bytes, little-endian, of SHA-256 over the flow schema's
/// name, a zero byte, and the flow distinguisher (empty where the schema distinguishes none).
pub fn flow_hash(flow_schema: &str, distinguisher: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(flow_schema.as_bytes());
    hash.update([0u8]);
    hash.update(distinguisher.as_bytes());
    let sum = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum[..8]);
    u64::from_le_bytes(first)
}

/// A conservative estimate of the bits of hash a deal of `hand` cards from `deck` uses: ceil(log2(deck) x hand).
pub fn required_entropy_bits(deck: u64, hand: u32) -> u32 {
    // At most 26 x 15 bits: the conversion cannot overflow.
    ((deck as f64).log2() * f64::from(hand)).ceil() as u32
}

/// Why a deck and hand cannot be dealt; the messages are kube-apiserver's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DealerError {
    #[error("deckSize {deck} or handSize {hand} is not positive")]
    NotPositive { deck: i64, hand: i64 },
    #[error("handSize {hand} is greater than deckSize {deck}")]
    HandOverDeck { deck: i64, hand: i64 },
    #[error("deckSize {deck} is impractically large")]
    DeckTooLarge { deck: i64 },
    #[error("required entropy bits of deckSize {deck} and handSize {hand} is greater than {MAX_HASH_BITS}")]
    TooMuchEntropy { deck: i64, hand: i64 },
    #[error("handSize {hand} is greater than {MAX_HAND}")]
    HandTooLarge { hand: i64 },
}

/// Deals hands of `hand` cards (queue indices) from a deck of `deck` (the level's queues).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dealer {
    deck: u64,
    hand: u32,
}

impl Dealer {
    /// A dealer for a level's `queues` and `handSize`, checked as kube-apiserver checks them.
    pub fn new(deck: i64, hand: i64) -> Result<Self, DealerError> {
        if deck <= 0 || hand <= 0 {
            return Err(DealerError::NotPositive { deck, hand });
        }
        if hand > deck {
            return Err(DealerError::HandOverDeck { deck, hand });
        }
        // Positive here: the conversions are exact.
        let (d, h) = (deck as u64, hand as u64);
        if d > MAX_DECK {
            return Err(DealerError::DeckTooLarge { deck });
        }
        if h > u64::from(MAX_HAND) {
            return Err(DealerError::HandTooLarge { hand });
        }
        let hand_u32 = h as u32;
        if required_entropy_bits(d, hand_u32) > MAX_HASH_BITS {
            return Err(DealerError::TooMuchEntropy { deck, hand });
        }
        Ok(Self {
            deck: d,
            hand: hand_u32,
        })
    }

    /// The hand `hash` deals, in the order dealt: distinct cards in `0..deck`. The hash is read as a number in mixed
    /// radix (deck, deck - 1, ...); each digit picks among the cards not dealt yet.
    pub fn deal(&self, hash: u64) -> Vec<u64> {
        let mut remainders = [0u64; MAX_HAND as usize];
        let mut rest = hash;
        for (i, r) in remainders.iter_mut().take(self.hand as usize).enumerate() {
            let radix = self.deck - i as u64;
            *r = rest % radix;
            rest /= radix;
        }
        let mut hand = Vec::with_capacity(self.hand as usize);
        for i in 0..self.hand as usize {
            let mut card = remainders[i];
            // Skip the cards dealt before, as the digits of the smaller decks count without them.
            for j in (1..=i).rev() {
                if card >= remainders[j - 1] {
                    card += 1;
                }
            }
            hand.push(card);
        }
        hand
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_hash_is_kube_apiservers_sha_256() {
        // Python's hashlib over the same bytes: sha256(b"service-accounts\0system:serviceaccount:monitoring:agent").
        assert_eq!(
            flow_hash("service-accounts", "system:serviceaccount:monitoring:agent"),
            3_313_672_343_408_768_745
        );
        assert_eq!(
            flow_hash("global-default", "alice"),
            17_644_606_172_554_983_095
        );
        assert_eq!(flow_hash("catch-all", ""), 7_733_929_212_674_924_205);
    }

    // The cases of kube-apiserver's shufflesharding_test.go.
    #[test]
    fn required_entropy_bits_as_kube_apiserver_counts_them() {
        assert_eq!(required_entropy_bits(1024, 6), 60);
        assert_eq!(required_entropy_bits(512, 8), 72);
    }

    #[test]
    fn a_dealer_refuses_what_kube_apiserver_refuses_with_its_words() {
        let err = |deck, hand| Dealer::new(deck, hand).unwrap_err().to_string();
        assert_eq!(err(-100, 8), "deckSize -100 or handSize 8 is not positive");
        assert_eq!(err(100, 0), "deckSize 100 or handSize 0 is not positive");
        assert_eq!(err(100, 101), "handSize 101 is greater than deckSize 100");
        assert_eq!(err(1 << 27, 2), "deckSize 134217728 is impractically large");
        assert_eq!(
            err(512, 8),
            "required entropy bits of deckSize 512 and handSize 8 is greater than 60"
        );
        assert!(Dealer::new(1024, 6).is_ok());
    }

    #[test]
    fn a_hand_holds_distinct_cards_of_the_deck() {
        let mut hash = 0x9e37_79b9_7f4a_7c15u64;
        for (deck, hand) in [
            (4, 4),
            (8, 8),
            (10, 10),
            (12, 12),
            (128, 8),
            (256, 7),
            (512, 6),
        ] {
            let dealer = Dealer::new(deck, hand).unwrap();
            for _ in 0..200 {
                // A splitmix-style walk over hashes: deterministic, spread over all 64 bits.
                hash = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let dealt = dealer.deal(hash);
                assert_eq!(dealt.len() as i64, hand);
                let mut sorted = dealt.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len() as i64, hand, "{deck}/{hand}: {dealt:?}");
                assert!(dealt.iter().all(|c| (*c as i64) < deck), "{dealt:?}");
            }
        }
    }

    #[test]
    fn small_deals_by_hand() {
        // Hash 0: every digit 0, each the first card not dealt yet.
        assert_eq!(Dealer::new(4, 4).unwrap().deal(0), [0, 1, 2, 3]);
        // 5 in radix (8, 7): digits 5, 0; the second card is the first of the seven left.
        assert_eq!(Dealer::new(8, 2).unwrap().deal(5), [5, 0]);
        // 13 in radix (8, 7): 13 = 5 + 8 x 1; the second digit 1 is the second of the cards left (0, 1, ...): 1.
        assert_eq!(Dealer::new(8, 2).unwrap().deal(13), [5, 1]);
        // 45 = 5 + 8 x 5: second digit 5, and card 5 is taken: the sixth of the cards left (0, 1, 2, 3, 4, 6, 7) is 6.
        assert_eq!(Dealer::new(8, 2).unwrap().deal(45), [5, 6]);
        // 53 = 5 + 8 x 6: the last of them, 7.
        assert_eq!(Dealer::new(8, 2).unwrap().deal(53), [5, 7]);
    }

    #[test]
    fn every_hand_is_dealt_equally_often() {
        // kube-apiserver's uniformity case (128, 3): over every hash below 128 x 127 x 126, each unordered hand comes
        // up exactly 3! times.
        let (deck, hand) = (128u64, 3u32);
        let dealer = Dealer::new(deck as i64, i64::from(hand)).unwrap();
        let deals = deck * (deck - 1) * (deck - 2);
        let mut seen = std::collections::HashMap::<u64, u32>::new();
        for h in 0..deals {
            let mut cards = dealer.deal(h);
            cards.sort_unstable();
            let coordinate = cards.iter().fold(0, |a, c| (a << 7) + c);
            *seen.entry(coordinate).or_default() += 1;
        }
        let hands = deals / 6;
        assert_eq!(seen.len() as u64, hands);
        assert!(seen.values().all(|n| *n == 6));
    }
}
