//! A session's budget: a cap on its cost in cents (`budget.cents` of its record; 0 = no cap).
//!
//! Cost is what the usage events price (the engine's price table, in US dollars), summed in the
//! session's usage totals. The cap is checked after every model call (the call that reaches it
//! ends its turn with `budget_hit`), before a turn starts, and before any input is taken (the
//! rule of `store::intake`: `budget_hit` on every family until the budget is raised).

#[cfg(test)]
use crate::error::Error;
pub use crate::store::record::{reached, spent_cents, whole_cents};

/// A turn the budget stopped ends `complete` / `failed` with [`Error::BudgetHit`]'s text; this
/// recognises it (the seed's `complete` event has no field for a code).
pub fn is_budget_failure(error: &str) -> bool {
    error.starts_with("budget_hit:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_whole_cents_of_the_priced_usage() {
        let totals = |usd: f64| {
            format!(
                r#"{{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":{usd}}}}}"#
            )
        };
        assert!(!reached(0, Some(&totals(5.0))), "0 is no cap");
        assert!(!reached(3, Some(&totals(0.0299))));
        assert!(reached(3, Some(&totals(0.03))));
        assert!(!reached(3, None));
        assert_eq!(whole_cents(spent_cents(Some(&totals(0.0299)))), 2);
    }

    #[test]
    fn a_budget_stop_is_recognised_by_its_error_text() {
        assert!(is_budget_failure(
            &Error::BudgetHit { cents: 5 }.to_string()
        ));
        assert!(!is_budget_failure("the model endpoint answered 500"));
    }
}
