//! Filters kept in a page's URL, typed. A filter struct says which page it
//! belongs to ([`UrlQuery::PATH`]); serde reads it from the query string
//! (a missing or unknown parameter is ignored, every field has a default)
//! and writes it back, leaving out what is blank, so a link to "the same
//! list, older" or "the jobs of this tenant" is `filter.url()` and never a
//! string put together by hand.

use leptos::prelude::*;
use leptos_router::{hooks::use_query_map, params::ParamsMap};
use serde::{
    de::{value::MapDeserializer, DeserializeOwned},
    Serialize,
};

/// A page's filters, read from and written to its query string.
pub trait UrlQuery:
    Serialize + DeserializeOwned + Default + Clone + PartialEq + Send + Sync
{
    /// The page the filters belong to: `/admin/jobs`.
    const PATH: &'static str;

    /// The filters in `params`; a parameter that does not fit (`before=x`
    /// where a number belongs) is left at its default, as if it were absent.
    fn from_params(params: &ParamsMap) -> Self {
        let read = |pairs: Vec<(&str, &str)>| {
            Self::deserialize(MapDeserializer::<_, serde::de::value::Error>::new(
                pairs.into_iter(),
            ))
        };
        let fitting: Vec<(&str, &str)> = params
            .latest_values()
            .map(|(k, v)| (k.as_ref(), v))
            .filter(|pair| read(vec![*pair]).is_ok())
            .collect();
        read(fitting).unwrap_or_default()
    }

    /// Back to the first page of the list (the keyset cursor cleared): a
    /// new filter starts there.
    fn first_page(&mut self) {}

    /// The page's address with these filters: blank ones are left out.
    fn url(&self) -> String {
        match serde_urlencoded::to_string(self) {
            Ok(q) if !q.is_empty() => format!("{}?{q}", Self::PATH),
            _ => Self::PATH.to_string(),
        }
    }
}

/// The filters of the current URL, following it (a link, the back button).
pub fn use_url_query<T: UrlQuery + 'static>() -> Memo<T> {
    let query = use_query_map();
    Memo::new(move |_| query.with(T::from_params))
}

/// For `#[serde(skip_serializing_if = "blank")]`: a blank filter is no
/// filter, and has no place in a URL.
pub fn blank(s: &str) -> bool {
    s.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dto::{AdminJobQuery, AuditQuery, DeadLetterQuery};

    #[test]
    fn filters_come_back_from_their_url_and_blank_ones_are_left_out() {
        let f = AdminJobQuery {
            state: "failed".into(),
            q: "a b&c.pdf".into(),
            before: "x".into(),
            ..Default::default()
        };
        let url = f.url();
        assert_eq!(url, "/admin/jobs?state=failed&q=a+b%26c.pdf&before=x");
        let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let params: ParamsMap = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .expect("a query string")
            .into_iter()
            .collect();
        assert_eq!(AdminJobQuery::from_params(&params), f);
        assert_eq!(AdminJobQuery::default().url(), "/admin/jobs");
        assert_eq!(
            DeadLetterQuery {
                tenant: "  ".into(),
                reason: "permanent".into(),
                ..Default::default()
            }
            .url(),
            "/admin/dead-letters?reason=permanent"
        );
    }

    #[test]
    fn unknown_parameters_are_ignored_and_missing_ones_are_blank() {
        let params: ParamsMap = [("step", "embed"), ("utm_source", "mail")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        let f = AdminJobQuery::from_params(&params);
        assert_eq!(f.step, "embed");
        assert_eq!(f.state, "");
        let params: ParamsMap = [("actor", "ana@demo.test"), ("before", "yesterday")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        let f = AuditQuery::from_params(&params);
        assert_eq!((f.actor.as_str(), f.before), ("ana@demo.test", None));
        assert_eq!(
            AdminJobQuery {
                q: "café au lait".into(),
                ..Default::default()
            }
            .url(),
            "/admin/jobs?q=caf%C3%A9+au+lait"
        );
    }
}
