//! Properties of generated histories: clean ones have no anomaly; removing one delivery or
//! repeating one is flagged as exactly the anomaly it makes.

use parley_history::{check, AnomalyKind, Record};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::generate::{clean_history, Shape};

fn shapes() -> impl Strategy<Value = Shape> {
    (1usize..4, 1usize..5, 0usize..30, any::<u64>()).prop_map(|(convs, members, sends, seed)| {
        Shape {
            convs,
            members,
            sends,
            seed,
        }
    })
}

/// Indices of the delivery records.
fn deliveries(records: &[Record]) -> Vec<usize> {
    (0..records.len())
        .filter(|&i| matches!(records[i], Record::Delivery(_)))
        .collect()
}

proptest! {
    #[test]
    fn a_generated_clean_history_has_no_anomaly(shape in shapes()) {
        let h = clean_history(shape);
        let report = check(&h.records);
        prop_assert_eq!(report.total(), 0, "{:#?}", report);
        prop_assert!(report.recovered <= report.unknown_outcomes);
    }

    #[test]
    fn removing_one_delivery_is_flagged(shape in shapes(), pick in any::<Index>()) {
        let mut h = clean_history(shape);
        let all = deliveries(&h.records);
        let i = all[pick.index(all.len())];
        let Record::Delivery(removed) = h.records.remove(i) else { unreachable!() };
        // The last delivery of its stream leaves a tail never delivered; any other, a seq its
        // later deliveries jumped over.
        let later = h.records[i..].iter().any(|r| {
            matches!(r, Record::Delivery(d) if d.device == removed.device && d.conv == removed.conv)
        });
        let kind = if later { AnomalyKind::SkippedDelivery } else { AnomalyKind::Undelivered };
        let report = check(&h.records);
        prop_assert_eq!(report.kinds(), vec![kind], "{:#?}", report);
        prop_assert_eq!(report.total(), 1);
    }

    #[test]
    fn repeating_one_delivery_is_duplicated(
        shape in shapes(),
        pick in any::<Index>(),
        later in any::<Index>(),
    ) {
        let mut h = clean_history(shape);
        let all = deliveries(&h.records);
        let i = all[pick.index(all.len())];
        let copy = h.records[i].clone();
        let at = i + 1 + later.index(h.records.len() - i);
        h.records.insert(at, copy);
        let report = check(&h.records);
        prop_assert_eq!(report.kinds(), vec![AnomalyKind::Duplicated], "{:#?}", report);
        prop_assert_eq!(report.total(), 1);
    }
}
