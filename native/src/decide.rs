//! Scores and 0/1 decisions of a batch's response rows, as `serving_checks.decisions` makes
//! them (one rule for both compiled decoders): the decision column when one is mapped, else
//! the score against the model's threshold; no score column gives NaN scores. `None` (the
//! batch declined) for a score that is no number in [0, 1], a decision that is not 0/1, or
//! neither a decision column nor a threshold.

/// `scores` / `decisions`: each row's value read as a number / as 0 or 1 (`None`: it is not).
pub fn decide(
    n: usize,
    scores: Option<impl Iterator<Item = Option<f64>>>,
    decisions: Option<impl Iterator<Item = Option<u8>>>,
    threshold: Option<f64>,
) -> Option<(Vec<f64>, Vec<u8>)> {
    let scores: Vec<f64> = match scores {
        Some(col) => col
            .map(|s| s.filter(|s| (0.0..=1.0).contains(s)))
            .collect::<Option<_>>()?,
        None => vec![f64::NAN; n],
    };
    let preds = match (decisions, threshold) {
        (Some(col), _) => col.collect::<Option<Vec<u8>>>()?,
        (None, Some(t)) => scores.iter().map(|s| u8::from(*s >= t)).collect(),
        (None, None) => return None,
    };
    (scores.len() == n && preds.len() == n).then_some((scores, preds))
}
