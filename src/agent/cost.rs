//! Pricing an agent step's token usage from the prices a pipeline gives per model.
//!
//! Prices are in US dollars per million tokens, the unit providers publish. Cached prompt
//! tokens are a subset of the prompt tokens: they are charged at the cached price when one
//! is given, and at the prompt price otherwise. A model with no price is shown as unpriced
//! rather than as free, so a missing price is never mistaken for a zero cost.

use std::fmt;

use serde::{Deserialize, Serialize};
use treadle_event::Usage;

pub use crate::pipeline::settings::{ModelPrice, Prices};

/// The cost of some usage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cost", rename_all = "snake_case")]
pub enum Cost {
    /// Priced, in US dollars.
    Priced {
        /// The amount.
        usd: f64,
    },
    /// No price is known for the model.
    Unpriced,
}

impl Cost {
    /// The amount, when priced.
    pub fn usd(self) -> Option<f64> {
        match self {
            Self::Priced { usd } => Some(usd),
            Self::Unpriced => None,
        }
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Four decimals: a small model's step often costs a fraction of a cent.
            Self::Priced { usd } => write!(f, "${usd:.4}"),
            Self::Unpriced => f.write_str("unpriced"),
        }
    }
}

/// Prices `usage` at `price`.
pub fn cost(usage: &Usage, price: Option<&ModelPrice>) -> Cost {
    let Some(price) = price else {
        return Cost::Unpriced;
    };
    let cached = usage.cached_tokens.min(usage.prompt_tokens);
    let uncached = usage.prompt_tokens - cached;
    let per_token = |tokens: u64, per_million: f64| tokens as f64 * per_million / 1_000_000.0;
    let usd = per_token(uncached, price.prompt)
        + per_token(cached, price.cached.unwrap_or(price.prompt))
        + per_token(usage.completion_tokens, price.completion);
    Cost::Priced { usd }
}

/// The price for a model, looked up by each name it may be known by: the name as written
/// in the pipeline (`openai/gpt-4o-mini`), the name sent to the endpoint (`gpt-4o-mini`),
/// and the name the endpoint reported serving.
pub fn find_price<'a>(prices: &'a Prices, names: &[&str]) -> Option<&'a ModelPrice> {
    names.iter().find_map(|name| prices.get(*name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64, cached: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: cached,
        }
    }

    #[test]
    fn prices_prompt_completion_and_cached_tokens() {
        let price = ModelPrice {
            prompt: 2.0,
            completion: 8.0,
            cached: Some(0.5),
        };
        let c = cost(&usage(1_000_000, 500_000, 400_000), Some(&price));
        // 600k uncached at $2/M + 400k cached at $0.5/M + 500k completion at $8/M.
        assert_eq!(c.usd(), Some(1.2 + 0.2 + 4.0));
        assert_eq!(c.to_string(), "$5.4000");
    }

    #[test]
    fn cached_defaults_to_the_prompt_price() {
        let price = ModelPrice {
            prompt: 1.0,
            completion: 0.0,
            cached: None,
        };
        assert_eq!(
            cost(&usage(1_000_000, 0, 300_000), Some(&price)).usd(),
            Some(1.0)
        );
    }

    #[test]
    fn no_price_is_unpriced_not_free() {
        assert_eq!(cost(&usage(10, 10, 0), None), Cost::Unpriced);
        assert_eq!(Cost::Unpriced.to_string(), "unpriced");
    }

    #[test]
    fn finds_a_price_by_any_name() {
        let mut prices = Prices::new();
        prices.insert("gpt-4o-mini".into(), ModelPrice::default());
        assert!(find_price(&prices, &["openai/gpt-4o-mini", "gpt-4o-mini"]).is_some());
        assert!(find_price(&prices, &["other"]).is_none());
    }
}
